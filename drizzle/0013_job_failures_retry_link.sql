-- Links a failure recorded for a retried job to the failure it retried
-- (job_failures.retry_message_id = the new failure's message_id), for the listings.
CREATE INDEX "job_failures_retry_message_id_idx" ON "job_failures" USING btree ("retry_message_id");
