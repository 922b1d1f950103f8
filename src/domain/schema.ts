import { sql } from "drizzle-orm";
import { index, pgTable, text, timestamp, uuid } from "drizzle-orm/pg-core";

const tz = { withTimezone: true, mode: "date" } as const;

/** Reference domain: notes whose watched columns are recorded as events by a trigger. */
export const corpusNotes = pgTable("corpus_notes", {
  id: uuid("id").primaryKey().defaultRandom(),
  scope: text("scope"),
  title: text("title").notNull(),
  body: text("body").notNull().default(""),
  tags: text("tags")
    .array()
    .notNull()
    .default(sql`'{}'::text[]`),
  createdAt: timestamp("created_at", tz).notNull().defaultNow(),
  // Not watched: touching it alone must not record an event.
  updatedAt: timestamp("updated_at", tz).notNull().defaultNow(),
});

export const supplierStatuses = ["created", "connected", "active"] as const;
export type SupplierStatus = (typeof supplierStatuses)[number];

/** Reference domain: suppliers, whose use cases record events explicitly with recordEvent. */
export const suppliers = pgTable(
  "suppliers",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    scope: text("scope"),
    name: text("name").notNull(),
    status: text("status").$type<SupplierStatus>().notNull().default("created"),
    connectedAt: timestamp("connected_at", tz),
    activatedAt: timestamp("activated_at", tz),
    createdAt: timestamp("created_at", tz).notNull().defaultNow(),
  },
  (t) => [index("suppliers_scope_idx").on(t.scope)],
);
