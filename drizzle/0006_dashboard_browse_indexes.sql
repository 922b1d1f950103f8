-- The dashboard's events page (src/outbox/browse.ts); why these four and what each
-- costs the relay's mark: docs/adr/0013-events-page-indexes.md. This file runs in
-- the migrator's transaction, which blocks writes to events while it builds: on a
-- large live table, create them beforehand with CREATE INDEX CONCURRENTLY under
-- these names, which this file then leaves alone.
CREATE INDEX IF NOT EXISTS "events_seq_created_brin" ON "events" USING brin ((seq + 0) int8_minmax_multi_ops,"created_at" timestamptz_minmax_multi_ops) WITH (pages_per_range=16,autosummarize=true);--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "events_type_seq_idx" ON "events" USING btree ("type","seq");--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "events_scope_seq_idx" ON "events" USING btree ("scope","seq");--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "events_subject_seq_idx" ON "events" USING btree ("subject","seq");