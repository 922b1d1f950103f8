-- Hand-edited (drizzle-kit does not model functions). Self-contained: it depends on
-- no other migration after 0005, so it can be renumbered if another lands first.

-- Event ids become time-ordered (UUIDv7, RFC 9562). The relay's mark is a non-HOT
-- update, so every marked row gets a new entry in the unique index on id: with random
-- (v4) ids each of a batch's rows lands on a random leaf, with v7 ids a batch's rows
-- are neighbours and share a few leaves (ADR 0014). PG 15 has no uuidv7() (PG 18 does),
-- so it is built here: the millisecond clock over the first 6 bytes of a v4, whose
-- version nibble 0100 becomes 0111 by setting bits 52 and 53 (set_bit counts from
-- byte 0's low bit); the variant bits are already the RFC's. clock_timestamp(), not
-- now(): rows of one long transaction still get increasing ids.
CREATE OR REPLACE FUNCTION outbox_uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT encode(
    set_bit(set_bit(
      overlay(uuid_send(gen_random_uuid())
        PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
        FROM 1 FOR 6),
      52, 1), 53, 1),
    'hex')::uuid
$$;
--> statement-breakpoint
ALTER TABLE "events" ALTER COLUMN "id" SET DEFAULT outbox_uuid_v7();
--> statement-breakpoint

-- The mark also added an entry to this index for every row it fanned. Retention, its
-- only reader in the relay's core, now walks fanned rows by seq (maintenance.ts).
DROP INDEX IF EXISTS "events_fanned_out_at_idx";
