import {
  defineSubscriptions,
  deploymentLabel,
  drain,
  type Publisher,
  type SqlPool,
} from "../../src/outbox/index.ts";

/**
 * Two subscriptions match every event, one of them coalescing: the shape issue 5
 * asks for (like `notify.mail` and `corpus.index` in the reference app).
 */
export const benchSubscriptions = defineSubscriptions([
  { name: "mail", types: ["*"] },
  { name: "index", types: ["*"], coalesce: true },
]);

/** Jobs go here; the dev server's delivery is paused, so nothing ever calls it. */
export const PUBLIC_URL = "http://127.0.0.1:9/never-called";

/** Every job carries its deployment's label, as the Worker's do (ADR 0027): the bytes production sends. */
export const LABEL = deploymentLabel(PUBLIC_URL);

/**
 * One drain per pool, all at once, until nothing is claimable: how the concurrency
 * phases run N relays against one backlog. Answers each relay's drain result.
 */
export function drainTogether(
  pools: SqlPool[],
  publisher: Publisher,
  batchSize: number,
): Promise<Awaited<ReturnType<typeof drain>>[]> {
  return Promise.all(
    pools.map((pool) =>
      drain({
        pool,
        publisher,
        subscriptions: benchSubscriptions,
        batchSize,
        budgetMs: 30 * 60_000,
        until: "empty",
      }),
    ),
  );
}
