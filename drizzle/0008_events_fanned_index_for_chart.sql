-- Back for the dashboard overview's fanned-per-minute chart (docs/adr/0014, amended).
-- This file runs in the migrator's transaction, which blocks writes to events while
-- it builds: on a large live table, create it beforehand with CREATE INDEX
-- CONCURRENTLY under this name, which this file then leaves alone.
CREATE INDEX IF NOT EXISTS "events_fanned_out_at_idx" ON "events" USING btree ("fanned_out_at") WHERE fanned_out_at IS NOT NULL;
