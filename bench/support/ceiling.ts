import { countFannedSql } from "../../src/outbox/relay/mark.ts";

/**
 * The physical limit the relay is compared with: the same claim and mark as ONE
 * plain SQL statement per batch (autocommit), with no publish, no planning and no
 * relay state. It returns the columns the relay reads, so the rows travel to the
 * client as they do for the relay.
 */
export function ceilingSql(batchSize: number, table = "events", counter = false): string {
  const mark = `UPDATE ${table} e SET fanned_out_at = now(), fanout = '{}'::jsonb
      FROM claimed c
     WHERE e.seq = c.seq
    RETURNING e.seq, e.id, e.type, e.subject, e.scope, e.payload, e.created_at, e.attempts`;
  const claimed = `claimed AS (
      SELECT seq FROM ${table}
       WHERE fanned_out_at IS NULL AND poisoned_at IS NULL
         AND (next_attempt_at IS NULL OR next_attempt_at <= now())
       ORDER BY seq
       LIMIT ${batchSize}
         FOR UPDATE SKIP LOCKED
    )`;
  if (!counter) return `WITH ${claimed}\n    ${mark}`;
  // With the fanned-per-minute count the relay's mark adds once per pass (migration
  // 0010), counted over the claimed seqs: every claimed row is marked by this statement.
  // Counted over the mark's RETURNING instead, as until 2026-12-03, Postgres kept the
  // returned rows, payloads and all, in a tuplestore for the second reader: a cost of
  // this statement's shape that the relay, whose mark returns seqs, never pays (it
  // made the count look like 40 % of the ceiling's backend CPU, against 6 % of its
  // instructions; docs/performance.md).
  return `WITH ${claimed}, ${countFannedSql("claimed", "now()")}
    ${mark}`;
}

/** The minimal table of the bare ceiling: today's row shape with a primary key and the claim's partial index only. */
export const BARE_TABLE = "bench_bare_events";

/**
 * Same columns, types, defaults and storage as `events`; of its indexes only the
 * primary key and the claim's partial index on seq, so the mark updates two indexes
 * (one of which the marked row leaves) instead of five.
 */
export function createBareTableSql(eventsReloptions: readonly string[]): string {
  const storage = eventsReloptions.length > 0 ? ` WITH (${eventsReloptions.join(", ")})` : "";
  return `CREATE TABLE IF NOT EXISTS ${BARE_TABLE} (LIKE events INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING STORAGE)${storage};
          ALTER TABLE ${BARE_TABLE} ADD PRIMARY KEY (seq);
          CREATE INDEX IF NOT EXISTS ${BARE_TABLE}_unfanned_seq_idx ON ${BARE_TABLE} (seq)
           WHERE fanned_out_at IS NULL AND poisoned_at IS NULL;`;
}

/**
 * Index candidates for the dashboard's events page (docs/adr/0013), each priced on
 * the mark by a `ceilingWith:<name>` throughput variant: the mark is a non-HOT
 * update, so every index it keeps gets one more entry (or, for BRIN, one more
 * summary check) per marked row. `none` is the same seed without extra indexes,
 * the denominator of each candidate's cost; since migration 0010 that is today's
 * `events`, whose page indexes live on events_browse (docs/adr/0016).
 */
const SEQ_TIME_BRIN = `CREATE INDEX bench_events_seq_created_brin ON events USING brin
   ((seq + 0) int8_minmax_multi_ops, created_at timestamptz_minmax_multi_ops) WITH (pages_per_range = 16, autosummarize = on)`;
const TYPE_BTREE = "CREATE INDEX bench_events_type_seq_idx ON events (type, seq)";
const SCOPE_BTREE = "CREATE INDEX bench_events_scope_seq_idx ON events (scope, seq)";
const SUBJECT_BLOOM = `CREATE INDEX bench_events_subject_scope_bloom ON events USING brin
   (subject text_bloom_ops, scope text_bloom_ops) WITH (pages_per_range = 16, autosummarize = on)`;
const SUBJECT_BTREE = "CREATE INDEX bench_events_subject_seq_idx ON events (subject, seq)";

export const BROWSE_INDEX_CANDIDATES = {
  none: [],
  /** The three B-trees first proposed: (subject, seq), (type text_pattern_ops, seq), (created_at). */
  btreeTrio: [
    SUBJECT_BTREE,
    "CREATE INDEX bench_events_type_seq_idx ON events (type text_pattern_ops, seq)",
    "CREATE INDEX bench_events_created_at_idx ON events (created_at)",
  ],
  createdAtBtree: ["CREATE INDEX bench_events_created_at_idx ON events (created_at)"],
  createdAtBrin: ["CREATE INDEX bench_events_created_at_brin ON events USING brin (created_at)"],
  seqTimeBrin: [SEQ_TIME_BRIN],
  seqTimeBrinMinmax: [
    `CREATE INDEX bench_events_seq_created_brin ON events USING brin ((seq + 0), created_at)
       WITH (pages_per_range = 16, autosummarize = on)`,
  ],
  typeOnlyBtree: ["CREATE INDEX bench_events_type_idx ON events (type)"],
  typeBtree: [TYPE_BTREE],
  scopeBtree: [SCOPE_BTREE],
  subjectBtree: [SUBJECT_BTREE],
  subjectBloom: [SUBJECT_BLOOM],
  /** What migration 0006 creates, under other names. */
  chosen: [SEQ_TIME_BRIN, TYPE_BTREE, SCOPE_BTREE, SUBJECT_BTREE],
} as const satisfies Record<string, readonly string[]>;

export type BrowseIndexCandidate = keyof typeof BROWSE_INDEX_CANDIDATES;
