-- Hand-written: drizzle-kit does not model triggers, seed rows or storage parameters.

-- The singleton row that carries pass-level backoff between stateless passes.
INSERT INTO outbox_relay_state (id) VALUES (1) ON CONFLICT DO NOTHING;
--> statement-breakpoint

-- Every fan-out turns a row into a dead tuple and leaves a dead entry at the head of
-- the partial claim index until VACUUM runs, so the claim would walk ever more dead
-- entries during a long drain. Vacuum this table after a small, fixed number of
-- changes instead of a fraction of its (growing) size. Fillfactor leaves room on each
-- page so the mark can place the new row version on the same page.
ALTER TABLE events SET (
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 5000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 10000,
  autovacuum_analyze_scale_factor = 0.02,
  autovacuum_vacuum_cost_delay = 0,
  fillfactor = 85
);
--> statement-breakpoint

-- A change to a note and its event commit together: the event is written by the
-- same statement's trigger, inside the writer's transaction. Only watched columns
-- count, so a write that changes nothing a subscriber sees records nothing.
CREATE OR REPLACE FUNCTION corpus_notes_record_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  ev_type text;
  note_id uuid;
  note_scope text;
  changed text[] := '{}';
BEGIN
  IF TG_OP = 'INSERT' THEN
    ev_type := 'corpus.note.created';
    note_id := NEW.id;
    note_scope := NEW.scope;
    changed := ARRAY['title', 'body', 'tags', 'scope'];
  ELSIF TG_OP = 'DELETE' THEN
    ev_type := 'corpus.note.deleted';
    note_id := OLD.id;
    note_scope := OLD.scope;
  ELSE
    IF NEW.title IS DISTINCT FROM OLD.title THEN changed := changed || 'title'::text; END IF;
    IF NEW.body IS DISTINCT FROM OLD.body THEN changed := changed || 'body'::text; END IF;
    IF NEW.tags IS DISTINCT FROM OLD.tags THEN changed := changed || 'tags'::text; END IF;
    IF NEW.scope IS DISTINCT FROM OLD.scope THEN changed := changed || 'scope'::text; END IF;
    IF cardinality(changed) = 0 THEN
      RETURN NULL;
    END IF;
    ev_type := 'corpus.note.changed';
    note_id := NEW.id;
    note_scope := NEW.scope;
  END IF;

  INSERT INTO events (type, subject, scope, payload)
  VALUES (ev_type, note_id::text, note_scope,
          jsonb_build_object('noteId', note_id, 'changed', to_jsonb(changed)));

  -- A wake-up only: an empty payload lets Postgres fold a bulk import's
  -- notifications into one per transaction.
  PERFORM pg_notify('outbox_events', '');
  RETURN NULL;
END
$$;
--> statement-breakpoint

CREATE TRIGGER corpus_notes_events
AFTER INSERT OR UPDATE OR DELETE ON corpus_notes
FOR EACH ROW EXECUTE FUNCTION corpus_notes_record_event();
