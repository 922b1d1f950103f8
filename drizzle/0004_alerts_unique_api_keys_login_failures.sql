CREATE TABLE "api_keys" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"scope" text,
	"name" text NOT NULL,
	"prefix" text NOT NULL,
	"key_hash" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"last_used_at" timestamp with time zone,
	"revoked_at" timestamp with time zone,
	CONSTRAINT "api_keys_key_hash_unique" UNIQUE("key_hash")
);
--> statement-breakpoint
CREATE TABLE "dashboard_login_failures" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "dashboard_login_failures_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"client" text NOT NULL,
	"failed_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "api_keys_scope_idx" ON "api_keys" USING btree ("scope");--> statement-breakpoint
CREATE INDEX "dashboard_login_failures_client_idx" ON "dashboard_login_failures" USING btree ("client","failed_at");--> statement-breakpoint
-- A database that already had overlapping sweeps may hold duplicate open relay
-- alerts; keep the oldest of each kind open so the unique index can be built.
UPDATE "outbox_alerts" SET "resolved_at" = now()
 WHERE "id" IN (
   SELECT "id" FROM (
     SELECT "id", row_number() OVER (PARTITION BY "kind" ORDER BY "id") AS rn
       FROM "outbox_alerts" WHERE "resolved_at" IS NULL AND "kind" LIKE 'relay.%'
   ) d WHERE d.rn > 1
 );--> statement-breakpoint
CREATE UNIQUE INDEX "outbox_alerts_open_relay_kind_key" ON "outbox_alerts" USING btree ("kind") WHERE resolved_at IS NULL AND kind LIKE 'relay.%';