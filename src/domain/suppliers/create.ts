import { recordEvent } from "../../outbox/index.ts";
import { suppliers } from "../schema.ts";
import type { Db } from "../db.ts";
import { supplierInput, supplierPayload, type Supplier, type SupplierInput } from "./schemas.ts";

export async function createSupplier(
  db: Db,
  input: SupplierInput,
): Promise<{ supplier: Supplier; eventIds: string[] }> {
  const values = supplierInput.parse(input);
  return db.transaction(async (tx) => {
    const [supplier] = await tx.insert(suppliers).values(values).returning();
    if (!supplier) throw new Error("createSupplier: INSERT returned no row");
    const event = await recordEvent(tx, {
      type: "supplier.created",
      subject: supplier.id,
      scope: supplier.scope,
      payload: supplierPayload(supplier),
    });
    return { supplier, eventIds: [event.id] };
  });
}
