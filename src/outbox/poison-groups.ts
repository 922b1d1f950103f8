import { query, type Queryable } from "./sql.ts";
import { STATE_SQL } from "./state.ts";

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;
// Quoted values: 'x', "x" and `x`, each without its own quote inside.
const QUOTED = /'[^']*'|"[^"]*"|`[^`]*`/g;
// An object's key is no particular: a quoted string after `{` or `,` and before `:`
// (`{"error":"invalid destination"}`) is kept, so the heading says what was wrong.
const KEY_BEFORE = /[{,]\s*$/;
const KEY_AFTER = /^\s*:/;
// Numbers as whole tokens (status codes, ids, durations, 1.5), not digits inside words like "s3" or "utf8".
const NUMBER = /(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])/g;
// Long hex runs are message ids and hashes.
const HEX = /\b(?=[0-9a-f]*\d)[0-9a-f]{12,}\b/gi;

/**
 * The cause of an error with its particulars taken out, so the same failure on
 * a thousand rows reads as one: uuids, quoted values, hex ids and numbers become
 * placeholders, whitespace collapses. `publish 400: "subject 7f3…" too long` and
 * `publish 400: "subject 9a1…" too long` share a fingerprint; a 400 and a 413 do
 * not differ by it either, which is deliberate: the status is in the example.
 * A JSON body's keys are kept, its values not: `QStash <n>: {"error":<value>}`.
 */
export function errorFingerprint(message: string | null): string {
  if (message === null || message.trim() === "") return "(no error recorded)";
  return message
    .replace(UUID, "<id>")
    .replace(QUOTED, (quoted, at: number, whole: string) =>
      KEY_AFTER.test(whole.slice(at + quoted.length, at + quoted.length + 40)) &&
      KEY_BEFORE.test(whole.slice(Math.max(0, at - 40), at))
        ? quoted
        : "<value>",
    )
    .replace(HEX, "<id>")
    .replace(NUMBER, "<n>")
    .replace(/\s+/g, " ")
    .trim()
    .slice(0, 300);
}

export interface PoisonedGroup {
  fingerprint: string;
  count: number;
  firstSeen: Date;
  lastSeen: Date;
  types: string[];
  example: { id: string; type: string; subject: string; lastError: string | null };
  /** Newest first, as many as the page shows for a hand-picked requeue. */
  ids: string[];
}

/**
 * How many poisoned rows are read to group. Poisoned rows are rare by design
 * (only a row's own errors poison it, ADR 0003); past this the groups show the
 * newest ones and say so, rather than grouping an unbounded set in a Worker.
 */
export const GROUP_SCAN_LIMIT = 5_000;

export interface PoisonedGroups {
  groups: PoisonedGroup[];
  /** Rows read; equal to GROUP_SCAN_LIMIT means older poisoned rows were left out. */
  scanned: number;
  truncated: boolean;
}

/** Poisoned events grouped by errorFingerprint, largest group first. */
export async function poisonedGroups(db: Queryable, scanLimit = GROUP_SCAN_LIMIT): Promise<PoisonedGroups> {
  const { rows: found } = await query<{
    id: string;
    type: string;
    subject: string;
    last_error: string | null;
    poisoned_at: Date;
  }>(
    db,
    `SELECT id, type, subject, last_error, poisoned_at FROM events
      WHERE ${STATE_SQL.poisoned} ORDER BY poisoned_at DESC, seq DESC LIMIT $1`,
    [scanLimit + 1],
  );
  const truncated = found.length > scanLimit;
  const byPrint = new Map<string, PoisonedGroup>();
  for (const r of found.slice(0, scanLimit)) {
    const lastError = r.last_error;
    const at = r.poisoned_at;
    const fingerprint = errorFingerprint(lastError);
    let group = byPrint.get(fingerprint);
    if (!group) {
      const example = { id: r.id, type: r.type, subject: r.subject, lastError };
      group = { fingerprint, count: 0, firstSeen: at, lastSeen: at, types: [], example, ids: [] };
      byPrint.set(fingerprint, group);
    }
    group.count += 1;
    if (at < group.firstSeen) group.firstSeen = at;
    if (at > group.lastSeen) group.lastSeen = at;
    if (!group.types.includes(r.type)) group.types.push(r.type);
    group.ids.push(r.id);
  }
  const groups = [...byPrint.values()].sort((a, b) => b.count - a.count || +b.lastSeen - +a.lastSeen);
  return { groups, scanned: Math.min(found.length, scanLimit), truncated };
}

/** The ids of the poisoned rows whose error has this fingerprint (within the scan limit). */
export async function poisonedIdsWithFingerprint(db: Queryable, fingerprint: string): Promise<string[]> {
  const { groups } = await poisonedGroups(db);
  return groups.find((g) => g.fingerprint === fingerprint)?.ids ?? [];
}
