import { z } from "zod";
import type { suppliers } from "../schema.ts";

export const supplierInput = z.strictObject({
  name: z.string().trim().min(1, "must not be empty").max(200),
  scope: z.string().trim().min(1, "must not be empty").max(128).nullable().default(null),
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
