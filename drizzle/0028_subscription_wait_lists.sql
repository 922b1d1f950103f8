CREATE TABLE "subscription_wait_lists" (
	"subscription" text PRIMARY KEY NOT NULL,
	"waiting" integer NOT NULL,
	"parallelism" integer NOT NULL,
	"in_flight" integer NOT NULL,
	"paused" boolean NOT NULL,
	"waiting_since" timestamp with time zone,
	"checked_at" timestamp with time zone NOT NULL,
	"unread_since" timestamp with time zone,
	"unread_error" text
);
--> statement-breakpoint
CREATE UNIQUE INDEX "outbox_alerts_open_subscription_backlog_key" ON "outbox_alerts" USING btree ("subscription") WHERE resolved_at IS NULL AND kind = 'subscription.backlogged';