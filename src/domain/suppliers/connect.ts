import type { Db } from "../db.ts";
import type { Within } from "../scope.ts";
import { now, transitionSupplier } from "./transition.ts";

export function connectSupplier(db: Db, id: string, within?: Within) {
  return transitionSupplier(
    db,
    id,
    {
      action: "connect",
      from: "created",
      to: "connected",
      event: "supplier.connected",
      set: { connectedAt: now() },
      why: "only a newly created supplier can be connected",
    },
    within,
  );
}
