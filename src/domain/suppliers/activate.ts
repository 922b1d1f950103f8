import type { Db } from "../db.ts";
import type { Within } from "../scope.ts";
import { now, transitionSupplier } from "./transition.ts";

export function activateSupplier(db: Db, id: string, within?: Within) {
  return transitionSupplier(
    db,
    id,
    {
      action: "activate",
      from: "connected",
      to: "active",
      event: "supplier.activated",
      set: { activatedAt: now() },
      why: "a supplier must be connected, and not yet active, to be activated",
    },
    within,
  );
}
