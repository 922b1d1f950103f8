-- The partial indexes are small (pending-without-job and failed rows) or, for a large
-- delivery log, can be made beforehand with CREATE INDEX CONCURRENTLY under these names.
ALTER TABLE "webhook_deliveries" ADD COLUMN "requested_at" timestamp with time zone DEFAULT now() NOT NULL;--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "webhook_deliveries_unpublished_idx" ON "webhook_deliveries" USING btree ("requested_at") WHERE status = 'pending' AND message_id IS NULL;--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "webhook_deliveries_finished_created_idx" ON "webhook_deliveries" USING btree ("created_at") WHERE status <> 'pending';--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "webhook_deliveries_failed_idx" ON "webhook_deliveries" USING btree ("failed_at") WHERE status = 'failed';