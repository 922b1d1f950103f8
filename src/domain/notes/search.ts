import { and, desc, eq, isNull, sql } from "drizzle-orm";
import { corpusIndex } from "../schema.ts";
import type { Db } from "../db.ts";
import { noteSearch, type NoteSearch } from "./schemas.ts";
import { inScope, type Within } from "../scope.ts";

export interface SearchHit {
  noteId: string;
  scope: string | null;
  title: string;
  rank: number;
  indexedAt: Date;
}

/**
 * Full-text search over corpus_index, which the `corpus.index` subscriber keeps:
 * a note written a moment ago may not be found until its event has been fanned
 * out and handled. `websearch_to_tsquery` accepts what people type (quotes, OR,
 * -minus) without ever raising a syntax error.
 */
export async function searchNotes(db: Db, params: NoteSearch, within?: Within): Promise<SearchHit[]> {
  const { q, scope, limit } = noteSearch.parse(params);
  const query = sql`websearch_to_tsquery('english', ${q})`;
  const rank = sql<number>`ts_rank(${corpusIndex.document}, ${query})`;
  return db
    .select({
      noteId: corpusIndex.noteId,
      scope: corpusIndex.scope,
      title: corpusIndex.title,
      rank,
      indexedAt: corpusIndex.indexedAt,
    })
    .from(corpusIndex)
    .where(
      and(
        sql`${corpusIndex.document} @@ ${query}`,
        scope === undefined
          ? undefined
          : scope === null
            ? isNull(corpusIndex.scope)
            : eq(corpusIndex.scope, scope),
        inScope(corpusIndex.scope, within),
      ),
    )
    .orderBy(desc(rank), corpusIndex.noteId)
    .limit(limit);
}
