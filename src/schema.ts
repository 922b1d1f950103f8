// drizzle-kit reads every table from here; the outbox core and the reference
// domain keep their own schema files so the core imports nothing of the domain.
export * from "./outbox/schema.ts";
export * from "./domain/schema.ts";
