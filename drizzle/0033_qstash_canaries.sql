CREATE TABLE "qstash_canaries" (
	"id" uuid PRIMARY KEY NOT NULL,
	"sent_at" timestamp with time zone DEFAULT now() NOT NULL,
	"message_id" text,
	"publish_error" text,
	"arrived_at" timestamp with time zone,
	"answer" text
);
--> statement-breakpoint
CREATE INDEX "qstash_canaries_sent_idx" ON "qstash_canaries" USING btree ("sent_at");--> statement-breakpoint
CREATE UNIQUE INDEX "outbox_alerts_open_jobs_not_arriving_key" ON "outbox_alerts" USING btree ("kind") WHERE resolved_at IS NULL AND kind = 'jobs.not_arriving';--> statement-breakpoint
CREATE UNIQUE INDEX "outbox_alerts_open_jobs_foreign_key" ON "outbox_alerts" USING btree ((details->>'label')) WHERE resolved_at IS NULL AND kind = 'jobs.foreign';