import { beforeEach, describe, expect, it } from "vitest";
import { EVENT_STATES, listEvents, stats } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

describe("event states", () => {
  it("refuses a row that is fanned and poisoned at once", async () => {
    const [id] = await seedEvents(t.pool, 1);
    await t.pool.query(`UPDATE events SET poisoned_at = now() WHERE id = $1`, [id]);
    await expect(
      t.pool.query(`UPDATE events SET fanned_out_at = now() WHERE id = $1`, [id]),
    ).rejects.toMatchObject({
      code: "23514",
      constraint: "events_one_state",
    });
  });

  it("puts every row in exactly one state, and the filters and stats agree", async () => {
    const ids = await seedEvents(t.pool, 6);
    await t.pool.query(`UPDATE events SET fanned_out_at = now() WHERE id = ANY($1::uuid[])`, [
      ids.slice(0, 3),
    ]);
    await t.pool.query(`UPDATE events SET poisoned_at = now(), attempts = 5 WHERE id = ANY($1::uuid[])`, [
      ids.slice(3, 5),
    ]);
    const byState = Object.fromEntries(
      await Promise.all(
        EVENT_STATES.map(async (state) => [
          state,
          (await listEvents(t.pool, { state })).map((e) => e.id).sort(),
        ]),
      ),
    );
    expect(byState).toEqual({
      fanned: ids.slice(0, 3).sort(),
      poisoned: ids.slice(3, 5).sort(),
      pending: ids.slice(5).sort(),
    });
    for (const state of EVENT_STATES) {
      const rows = await listEvents(t.pool, { state });
      expect(rows.map((e) => e.state)).toEqual(rows.map(() => state));
    }
    expect(await stats(t.pool)).toMatchObject({ backlog: 1, poisoned: 2 });
  });
});
