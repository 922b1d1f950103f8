ALTER TABLE "outbox_alerts" ADD COLUMN "notified_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "outbox_alerts" ADD COLUMN "notice_claimed_at" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "outbox_alerts_unnotified_idx" ON "outbox_alerts" USING btree ("id") WHERE notified_at IS NULL AND resolved_at IS NULL;