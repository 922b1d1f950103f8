-- Whether an operator's retry of a job failure worked: the retried job's route sets it
-- when it answers 200 (the job carries the failure's id, Edge-Outbox-Retry-Of).
-- Nullable: no rewrite.
ALTER TABLE "job_failures" ADD COLUMN "retry_delivered_at" timestamp with time zone;