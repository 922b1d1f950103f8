import type { Fanout, FanoutEntry } from "../schema.ts";
import { escapeInLiteral, literal, nowSql, results, send, type SqlClient } from "../sql.ts";
import type { DbBackoff } from "./backoff.ts";
import { RELAY_POLICY, backoffSecondsSql } from "./policy.ts";

export interface RowOutcome {
  seq: number;
  /** Set when every job of the row was published (or coalesced into one that was). */
  fanout?: Fanout;
  /** The row's own error; its attempts go up and the 5th poisons it. */
  error?: string;
  /** An error no later try can change (the row's size): the first poisons it. */
  permanent?: boolean;
}

export interface MarkResult {
  fanned: number;
  failed: number;
  poisoned: string[];
  /** The new backoff when `stateSql` recorded a failure; empty when it cleared one. */
  state: DbBackoff[];
  /** What the statements of `then` answered, one result each, when it was given. */
  then: unknown[];
}

/**
 * Records the pass's outcome and commits, in one round trip: fanned rows get
 * fanned_out_at and fanout; failed rows get attempts + 1, last_error and a due
 * time (RELAY_POLICY.rowRetry), and the last allowed failure poisons the row
 * and raises an alert in the same statement. `stateSql` settles the relay's
 * backoff in the same transaction. `then`, statements to run after the COMMIT,
 * rides the same round trip: a drain's next claim (ADR 0022). If one of them
 * fails, the query fails as a whole although the COMMIT before it held; the
 * caller cannot tell which, as when a connection drops during a COMMIT.
 *
 * The outcomes travel as literals because parameters would force the extended
 * protocol, which allows one statement per round trip.
 */
export async function markAndCommit(
  client: SqlClient,
  outcomes: RowOutcome[],
  stateSql: string,
  now: Date | undefined,
  then = "",
): Promise<MarkResult> {
  const NOW = nowSql(now);
  // A batch where every row published (the usual case) takes the compact statement,
  // without the failure branch: no per-row error column to read, no second join over
  // the input, no alert insert to plan. Any failed row takes the general one.
  const compact = outcomes.every((o) => o.error === undefined && o.fanout !== undefined);
  const mark = compact ? fannedOnlySql(outcomes, NOW) : generalSql(outcomes, NOW);
  const raw = await send(
    client,
    `${mark}
    ${stateSql};
    COMMIT;${then}`,
  );
  const [counts, state] = results<[{ fanned: number; failed: number; poisoned: string[] }, DbBackoff]>(raw);
  const row = counts?.rows[0];
  return {
    state: state?.rows ?? [],
    fanned: row?.fanned ?? 0,
    failed: row?.failed ?? 0,
    poisoned: row?.poisoned ?? [],
    // mark, state, COMMIT, then whatever followed.
    then: then && Array.isArray(raw) ? raw.slice(3) : [],
  };
}

/** Any outcomes, failed rows included; they travel as one jsonb document. */
function generalSql(outcomes: RowOutcome[], NOW: string): string {
  const input = literal(
    JSON.stringify(
      outcomes.map((o) => ({
        seq: o.seq,
        fanout: o.fanout ?? null,
        error: o.error ?? null,
        permanent: o.permanent === true,
      })),
    ),
  );
  const seqs = seqsSql(outcomes);
  return `
    WITH input AS (
      SELECT * FROM jsonb_to_recordset(${input}::jsonb) AS x(seq bigint, fanout jsonb, error text, permanent boolean)
    ), fanned AS (
      UPDATE events e
         SET fanned_out_at = ${NOW}, fanout = i.fanout
        FROM input i
       WHERE e.seq = i.seq AND e.seq = ANY(${seqs}) AND i.error IS NULL
      RETURNING e.seq
    ), ${countFannedSql("fanned", NOW)}, failed AS (
      UPDATE events e
         SET attempts = e.attempts + 1,
             last_error = i.error,
             next_attempt_at = ${NOW} + make_interval(secs => ${backoffSecondsSql("e.attempts", RELAY_POLICY.rowRetry)}),
             poisoned_at = CASE WHEN e.attempts + 1 >= ${RELAY_POLICY.poisonAfter} OR i.permanent THEN ${NOW} END
        FROM input i
       WHERE e.seq = i.seq AND e.seq = ANY(${seqs}) AND i.error IS NOT NULL
      RETURNING e.seq, e.id, e.type, e.attempts, e.poisoned_at, e.last_error
    ), ${poisonedAlertSql(NOW)}
    SELECT (SELECT count(*) FROM fanned)::int AS fanned,
           (SELECT count(*) FROM failed)::int AS failed,
           coalesce((SELECT jsonb_agg(id ORDER BY seq) FROM poisoned), '[]'::jsonb) AS poisoned;`;
}

/**
 * The alert's words, from its count and the latest poisoning's details: one
 * expression for a new alert and for one that folds in more, so both read alike. One
 * event reads as it always has ("event … (supplier.updated) poisoned after 5
 * failures: …"); more say how many of the type first.
 */
function poisonedMessageSql(count: string, details: string): string {
  const d = (key: string) => `(${details}->>'${key}')`;
  const after = `' poisoned after ' || ${d("attempts")}
      || CASE WHEN ${d("attempts")} = '1' THEN ' failure: ' ELSE ' failures: ' END || coalesce(${d("lastError")}, '')`;
  return `CASE WHEN ${count} = 1
      THEN 'event ' || ${d("eventId")} || ' (' || ${d("type")} || ')' || ${after}
      ELSE ${count} || ' events of type ' || ${d("type")} || ' were poisoned; the latest: event ' || ${d("eventId")} || ${after} END`;
}

/**
 * The CTEs that raise or fold into each poisoned row's type's one open
 * `event.poisoned` alert (ADR 0044), after `failed`: a fault charged to every row
 * (a QStash 400 for a header it would not take) poisoned events by the thousand and
 * raised as many alerts reading alike. The alert counts (`count`), dates
 * (`firstPoisonedAt`, `lastPoisonedAt`: the mark's own time, as `poisoned_at`) and
 * names the latest event (`eventId`, the alert's `event_id`, `attempts`,
 * `lastError`), as a subscription's job.failed alert does (ADR 0037). The open alert
 * is updated where there is one; ON CONFLICT covers another relay raising it after
 * this statement's snapshot. `poisoned` is the rows poisoned by this mark.
 */
export function poisonedAlertSql(NOW: string): string {
  // As the API writes times (domain/webhooks/rows.ts isoTime), truncated so that
  // firstPoisonedAt <= the poisoned_at of the event it dates.
  const at = `to_char(date_trunc('milliseconds', ${NOW}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
  // An open alert's details (`was`) with this mark's poisonings of its type
  // (`more`): the count added up, the rest the latest's, the first time kept. An
  // alert raised by a version before this one has no count: it counted one event.
  const fold = (was: string, more: string) => {
    const count = `(coalesce((${was}->>'count')::int, 1) + (${more}->>'count')::int)`;
    return `message = ${poisonedMessageSql(count, more)},
                details = ${was} || (${more} - 'firstPoisonedAt') || jsonb_build_object('count', ${count})`;
  };
  return `poisoned AS (
      SELECT * FROM failed WHERE poisoned_at IS NOT NULL
    ), latest AS (
      SELECT DISTINCT ON (p.type) p.type, p.id,
             jsonb_build_object('type', p.type, 'eventId', p.id, 'attempts', p.attempts,
                                'lastError', p.last_error, 'count', count(*) OVER (PARTITION BY p.type),
                                'firstPoisonedAt', ${at}, 'lastPoisonedAt', ${at}) AS details
        FROM poisoned p
       ORDER BY p.type, p.seq DESC
    ), folded AS (
      UPDATE outbox_alerts a
         SET event_id = l.id, ${fold("a.details", "l.details")}
        FROM latest l
       WHERE a.kind = 'event.poisoned' AND a.resolved_at IS NULL AND a.details->>'type' = l.type
      RETURNING l.type
    ), raised AS (
      INSERT INTO outbox_alerts (kind, event_id, message, details)
      SELECT 'event.poisoned', id, ${poisonedMessageSql("(details->>'count')::int", "details")}, details
        FROM latest WHERE type NOT IN (SELECT type FROM folded)
      ON CONFLICT ((details->>'type')) WHERE resolved_at IS NULL AND kind = 'event.poisoned'
      DO UPDATE SET event_id = EXCLUDED.event_id, ${fold("outbox_alerts.details", "EXCLUDED.details")}
      RETURNING 1
    )`;
}

/**
 * The mark of a batch where every row published, its fanout documents built by
 * Postgres from arrays unnested side by side: the seqs and, per subscription, the
 * message ids, plus the coalescing targets and the deduplicated flags only when the
 * batch has any. As one jsonb document of every row's fanout the mark was ~26 KB
 * per pass, mostly the same keys and braces row after row, which the relay built
 * (stringify, escape) and Postgres parsed again; as arrays it is a third of that.
 * (Sending it was less of the cost than it looked: a later profile showed the
 * socket write's time per call, not per byte.) The values stored are the general
 * statement's (jsonb orders keys itself); a subscription with no entry for a row
 * gives NULL, which is left out of the row's document (no entry value is ever null).
 */
function fannedOnlySql(outcomes: RowOutcome[], NOW: string): string {
  const names: string[] = [];
  for (let i = 0; i < outcomes.length; i++) {
    for (const name in outcomes[i]!.fanout) if (!names.includes(name)) names.push(name);
  }
  const seqs = seqsSql(outcomes);
  const arrays = [seqs];
  const columns = ["seq"];
  // Whether every name, message id and coalescing target is a JSON string as it
  // stands (QStash's ids are letters, digits, '_' and '-'; targets are uuids).
  let plain = true;
  const unescaped = (v: string | null) => v === null || !NEEDS_JSON_ESCAPE.test(v);
  const entries = names.map((name, k) => {
    const of = outcomes.map((o) => o.fanout![name]);
    const messageIds = of.map((e) => (e && "messageId" in e ? e.messageId : null));
    arrays.push(`${textArrayLiteral(messageIds)}::text[]`);
    columns.push(`m${k}`);
    plain &&= unescaped(name) && messageIds.every(unescaped);
    let published = `jsonb_build_object('messageId', i.m${k})`;
    const messageIdText = `${literal(`"${name}":{"messageId":"`)} || i.m${k}`;
    let publishedText = `${messageIdText} || '"}'`;
    if (of.some(isDeduplicated)) {
      arrays.push(`'{${of.map((e) => (isDeduplicated(e) ? "t" : "f")).join(",")}}'::bool[]`);
      columns.push(`d${k}`);
      published = `CASE WHEN i.d${k} THEN jsonb_build_object('messageId', i.m${k}, 'deduplicated', true) ELSE ${published} END`;
      publishedText = `${messageIdText} || CASE WHEN i.d${k} THEN '","deduplicated":true}' ELSE '"}' END`;
    }
    let entry = `CASE WHEN i.m${k} IS NOT NULL THEN ${published}`;
    let text = `CASE WHEN i.m${k} IS NOT NULL THEN ${publishedText}`;
    if (of.some((e) => e && "coalescedInto" in e)) {
      const targets = of.map((e) => (e && "coalescedInto" in e ? e.coalescedInto : null));
      arrays.push(`${textArrayLiteral(targets)}::text[]`);
      columns.push(`c${k}`);
      plain &&= targets.every(unescaped);
      entry += ` WHEN i.c${k} IS NOT NULL THEN jsonb_build_object('coalescedInto', i.c${k})`;
      text += ` WHEN i.c${k} IS NOT NULL THEN ${literal(`"${name}":{"coalescedInto":"`)} || i.c${k} || '"}'`;
    }
    return { entry: `${literal(name)}::text, ${entry} END`, text: `${text} END` };
  });
  let fanout = `'{}'::jsonb`;
  if (names.length > 0 && plain) {
    // Nothing to escape: the document is written as text and parsed once, which costs
    // Postgres about 40 % of the nested jsonb_build_object calls and their strip of
    // nulls (callgrind, docs/performance.md). concat_ws leaves out a NULL piece: a
    // subscription without an entry for the row.
    fanout = `('{' || concat_ws(',', ${entries.map((e) => e.text).join(", ")}) || '}')::jsonb`;
  } else if (names.length > 0) {
    fanout = `jsonb_strip_nulls(jsonb_build_object(${entries.map((e) => e.entry).join(", ")}))`;
  }
  return `
    WITH fanned AS (
      UPDATE events e
         SET fanned_out_at = ${NOW}, fanout = ${fanout}
        FROM unnest(${arrays.join(", ")}) AS i(${columns.join(", ")})
       WHERE e.seq = i.seq AND e.seq = ANY(${seqs})
      RETURNING e.seq
    ), ${countFannedSql("fanned", NOW)}
    SELECT (SELECT count(*) FROM fanned)::int AS fanned, 0 AS failed, '[]'::jsonb AS poisoned;`;
}

/**
 * The marked rows' seqs as an int8[] literal. Each mark also says `e.seq = ANY(<it>)`
 * beside its join: the join alone gives the planner no constant to probe `events`
 * with, and below ~25,000 rows it hashed the input and scanned the whole table every
 * pass (3.5 ms at 20,000 rows against 1.0 ms through the primary key, EXPLAIN
 * ANALYZE, docs/performance.md); with the list it reads the 200 rows by index at any
 * size.
 */
function seqsSql(outcomes: readonly RowOutcome[]): string {
  return `'{${outcomes.map((o) => o.seq).join(",")}}'::int8[]`;
}

/**
 * What JSON must escape in a string: '"', '\\' and the control characters U+0000 to
 * U+001F. \p{Cc} also takes U+007F to U+009F, which JSON leaves as they are: a batch
 * holding one only takes the statement that escapes.
 */
const NEEDS_JSON_ESCAPE = /["\\\p{Cc}]/u;

/**
 * A CTE (named `counted`) that adds the rows of CTE `from` to the overview chart's
 * fanned count for this minute: one upsert per pass, where an index on fanned rows
 * cost the mark one entry per row (docs/adr/0016). The row stays locked until the
 * pass commits; `slot` (the backend's pid modulo 16) keeps concurrent passes on
 * different rows, so they rarely wait for each other. A data-modifying CTE, so it
 * runs whether or not the statement reads it. Exported for the benchmark's ceiling.
 */
export function countFannedSql(from: string, NOW: string): string {
  return `counted AS (
      INSERT INTO outbox_fanned_minutes (minute, slot, fanned)
      SELECT date_trunc('minute', ${NOW}), pg_backend_pid() % 16, count(*) FROM ${from} HAVING count(*) > 0
      ON CONFLICT (minute, slot) DO UPDATE SET fanned = outbox_fanned_minutes.fanned + excluded.fanned
    )`;
}

function isDeduplicated(entry: FanoutEntry | undefined): boolean {
  return entry !== undefined && "deduplicated" in entry && entry.deduplicated === true;
}

/**
 * A text[] value as a SQL string literal (`E'{"a","b",NULL}'`): each element quoted
 * for the array (backslash and double quote escaped), then for SQL (escapeInLiteral,
 * as literal() does), NULL for null. Message ids are plain and
 * present for every row, so the usual array is one join of the values as they are,
 * and only an element that needs it is escaped: as quoted strings joined and then
 * escaped whole by two regex replaces, the mark's arrays were a tenth of what a
 * null-publisher pass allocated (docs/performance.md).
 */
function textArrayLiteral(values: readonly (string | null)[]): string {
  if (values.every((v) => v !== null && isPlain(v))) {
    return values.length === 0 ? "E'{}'" : `E'{"${values.join('","')}"}'`;
  }
  const elements = values.map((v) => {
    if (v === null) return "NULL";
    if (isPlain(v)) return `"${v}"`;
    return `"${escapeInLiteral(v.replace(/["\\]/g, "\\$&"))}"`;
  });
  return `E'{${elements.join(",")}}'`;
}

/** No double quote, single quote or backslash: nothing to escape in the array or in SQL. */
function isPlain(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c === 34 || c === 39 || c === 92) return false;
  }
  return true;
}
