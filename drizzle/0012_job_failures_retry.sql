-- An operator's retry of a recorded job failure (src/domain/job-failures/retry.ts,
-- docs/adr/0005, amended): `retried_at` is claimed before the new job is published,
-- `retry_message_id` names it once QStash accepted it. Both nullable: no rewrite.
ALTER TABLE "job_failures" ADD COLUMN "retried_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "job_failures" ADD COLUMN "retry_message_id" text;
