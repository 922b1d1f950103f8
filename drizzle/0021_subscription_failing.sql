CREATE TABLE "subscription_failures" (
	"subscription" text PRIMARY KEY NOT NULL,
	"streak_started_at" timestamp with time zone NOT NULL,
	"last_failed_at" timestamp with time zone NOT NULL,
	"attempts" integer NOT NULL,
	"last_error" text NOT NULL,
	"recovered_at" timestamp with time zone
);
--> statement-breakpoint
CREATE UNIQUE INDEX "outbox_alerts_open_subscription_failing_key" ON "outbox_alerts" USING btree ("subscription") WHERE resolved_at IS NULL AND kind = 'subscription.failing';