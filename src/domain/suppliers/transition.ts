import { and, eq, sql, type SQL } from "drizzle-orm";
import { recordEvent } from "../../outbox/index.ts";
import { suppliers, type SupplierStatus } from "../schema.ts";
import type { Db } from "../db.ts";
import { IllegalTransitionError, NotFoundError } from "../errors.ts";
import { supplierPayload, type Supplier } from "./schemas.ts";
import { inScope, type Within } from "../scope.ts";

interface Transition {
  action: string;
  from: SupplierStatus;
  to: SupplierStatus;
  event: string;
  set: Partial<Record<keyof typeof suppliers.$inferInsert, SQL>>;
  /** Said to the caller when the supplier is in any other state. */
  why: string;
}

/**
 * Moves a supplier along created → connected → active and records the event in
 * the same transaction. The status check is the UPDATE's own WHERE clause, so two
 * racing requests cannot both pass it: the loser sees zero rows and gets the
 * illegal-transition answer, never a second event.
 */
export async function transitionSupplier(
  db: Db,
  id: string,
  t: Transition,
  within?: Within,
): Promise<{ supplier: Supplier; eventIds: string[] }> {
  return db.transaction(async (tx) => {
    const [supplier] = await tx
      .update(suppliers)
      .set({ status: t.to, ...t.set })
      .where(and(eq(suppliers.id, id), eq(suppliers.status, t.from), inScope(suppliers.scope, within)))
      .returning();
    if (!supplier) {
      const [current] = await tx
        .select({ status: suppliers.status })
        .from(suppliers)
        .where(and(eq(suppliers.id, id), inScope(suppliers.scope, within)));
      if (!current) throw new NotFoundError("supplier", id);
      throw new IllegalTransitionError("supplier", id, current.status, t.action, t.why);
    }
    const event = await recordEvent(tx, {
      type: t.event,
      subject: supplier.id,
      scope: supplier.scope,
      payload: supplierPayload(supplier),
    });
    return { supplier, eventIds: [event.id] };
  });
}

export const now = () => sql`now()`;
