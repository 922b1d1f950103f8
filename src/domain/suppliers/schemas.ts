import { z } from "zod";
import type { suppliers } from "../schema.ts";
import { scopeValue, singleLine } from "../text.ts";

export const supplierInput = z.strictObject({
  name: singleLine(200),
  scope: scopeValue.optional(),
});
export type SupplierInput = z.input<typeof supplierInput>;

export type Supplier = typeof suppliers.$inferSelect;

/** The event payload: what a subscriber needs without reading the table back. */
export function supplierPayload(s: Supplier) {
  return {
    supplierId: s.id,
    name: s.name,
    status: s.status,
    connectedAt: s.connectedAt?.toISOString() ?? null,
    activatedAt: s.activatedAt?.toISOString() ?? null,
  };
}
