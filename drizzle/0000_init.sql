CREATE TABLE "outbox_alerts" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "outbox_alerts_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"kind" text NOT NULL,
	"event_id" uuid,
	"subscription" text,
	"message" text NOT NULL,
	"details" jsonb,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"resolved_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "events" (
	"seq" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "events_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"id" uuid DEFAULT gen_random_uuid() NOT NULL,
	"type" text NOT NULL,
	"subject" text NOT NULL,
	"scope" text,
	"payload" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"fanned_out_at" timestamp with time zone,
	"fanout" jsonb,
	"attempts" integer DEFAULT 0 NOT NULL,
	"last_error" text,
	"next_attempt_at" timestamp with time zone,
	"poisoned_at" timestamp with time zone,
	CONSTRAINT "events_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "outbox_relay_state" (
	"id" smallint PRIMARY KEY DEFAULT 1 NOT NULL,
	"failures" integer DEFAULT 0 NOT NULL,
	"backoff_until" timestamp with time zone,
	"last_error" text,
	"last_failure_at" timestamp with time zone,
	"last_success_at" timestamp with time zone,
	CONSTRAINT "outbox_relay_state_singleton" CHECK ("outbox_relay_state"."id" = 1)
);
--> statement-breakpoint
CREATE TABLE "corpus_notes" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"scope" text,
	"title" text NOT NULL,
	"body" text DEFAULT '' NOT NULL,
	"tags" text[] DEFAULT '{}'::text[] NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "suppliers" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"scope" text,
	"name" text NOT NULL,
	"status" text DEFAULT 'created' NOT NULL,
	"connected_at" timestamp with time zone,
	"activated_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "outbox_alerts_open_idx" ON "outbox_alerts" USING btree ("created_at") WHERE resolved_at IS NULL;--> statement-breakpoint
CREATE INDEX "events_unfanned_seq_idx" ON "events" USING btree ("seq") WHERE fanned_out_at IS NULL AND poisoned_at IS NULL;--> statement-breakpoint
CREATE INDEX "events_poisoned_idx" ON "events" USING btree ("poisoned_at") WHERE poisoned_at IS NOT NULL;--> statement-breakpoint
CREATE INDEX "events_fanned_out_at_idx" ON "events" USING btree ("fanned_out_at") WHERE fanned_out_at IS NOT NULL;--> statement-breakpoint
CREATE INDEX "suppliers_scope_idx" ON "suppliers" USING btree ("scope");