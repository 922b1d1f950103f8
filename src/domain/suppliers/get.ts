import { eq } from "drizzle-orm";
import { suppliers } from "../schema.ts";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import type { Supplier } from "./schemas.ts";

export async function getSupplier(db: Db, id: string): Promise<Supplier> {
  const [supplier] = await db.select().from(suppliers).where(eq(suppliers.id, id));
  if (!supplier) throw new NotFoundError("supplier", id);
  return supplier;
}
