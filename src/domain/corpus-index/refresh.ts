import { eq, sql } from "drizzle-orm";
import { corpusIndex } from "../schema.ts";
import type { Db } from "../db.ts";

export type RefreshOutcome = "indexed" | "removed" | "superseded";

/**
 * What the `corpus.index` subscriber does with a job: re-read the note's current
 * state into the search index, or drop it from the index when the note is gone.
 * Jobs arrive at least once and in no particular order, so:
 * - the note is read and written in one statement that takes FOR SHARE on the
 *   note row: a concurrent delete either waits for this statement's transaction
 *   (its own job then removes the row) or has committed, in which case the row is
 *   skipped and the index entry removed below — an entry is never resurrected;
 * - a row built for a later event is never overwritten by an earlier one.
 */
export async function refreshNoteIndex(
  db: Db,
  job: { noteId: string; eventSeq: number },
): Promise<RefreshOutcome> {
  return db.transaction(async (tx) => {
    const written = await tx.execute(sql`
      INSERT INTO corpus_index (note_id, scope, title, document, source_event_seq, indexed_at)
      SELECT n.id, n.scope, n.title,
             setweight(to_tsvector('english', n.title), 'A')
          || setweight(to_tsvector('english', array_to_string(n.tags, ' ')), 'B')
          || setweight(to_tsvector('english', n.body), 'C'),
             ${job.eventSeq}, now()
        FROM corpus_notes n
       WHERE n.id = ${job.noteId}
         FOR SHARE
      ON CONFLICT (note_id) DO UPDATE
         SET scope = excluded.scope, title = excluded.title, document = excluded.document,
             source_event_seq = excluded.source_event_seq, indexed_at = excluded.indexed_at
       WHERE corpus_index.source_event_seq <= excluded.source_event_seq
      RETURNING note_id`);
    if (rowCount(written) > 0) return "indexed";
    const [note] = await tx.execute(sql`SELECT 1 FROM corpus_notes WHERE id = ${job.noteId}`).then(rowsOf);
    if (note) return "superseded";
    await tx.delete(corpusIndex).where(eq(corpusIndex.noteId, job.noteId));
    return "removed";
  });
}

// node-postgres and the Neon Pool both answer execute() with a pg QueryResult.
function rowsOf(result: unknown): unknown[] {
  return (result as { rows: unknown[] }).rows;
}
function rowCount(result: unknown): number {
  return rowsOf(result).length;
}
