import { and, eq } from "drizzle-orm";
import { suppliers } from "../schema.ts";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import { inScope, type Within } from "../scope.ts";
import type { Supplier } from "./schemas.ts";

export async function getSupplier(db: Db, id: string, within?: Within): Promise<Supplier> {
  const [supplier] = await db
    .select()
    .from(suppliers)
    .where(and(eq(suppliers.id, id), inScope(suppliers.scope, within)));
  if (!supplier) throw new NotFoundError("supplier", id);
  return supplier;
}
