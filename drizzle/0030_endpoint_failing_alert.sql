-- One open webhook.endpoint_failing alert per endpoint, raised and resolved by the
-- cron sweep (src/domain/webhooks/lag.ts); overlapping sweeps meet at this index.
CREATE UNIQUE INDEX "outbox_alerts_open_endpoint_failing_key" ON "outbox_alerts" USING btree ((details->>'endpointId')) WHERE resolved_at IS NULL AND kind = 'webhook.endpoint_failing';