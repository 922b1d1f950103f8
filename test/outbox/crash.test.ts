import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { beforeEach, describe, expect, it } from "vitest";
import { runPass, stats } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, seedEvents, unfannedCount } from "../support/events.ts";
import { waitFor } from "../support/helpers.ts";
import { RecordingPublisher } from "../support/publishers.ts";
import { everything, resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

describe("a relay crash loses nothing", () => {
  it("rolls back when the pass's connection is cut between publish and commit; the next pass republishes the same ids", async () => {
    const ids = await seedEvents(t.pool, 5);
    const publisher = new RecordingPublisher();
    const relayPool = t.newPool(1);
    publisher.afterAccept = async () => {
      // The relay's transaction is idle between publish and mark: cut it there.
      const { rowCount } = await t.pool.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND state = 'idle in transaction'`,
      );
      expect(rowCount).toBe(1);
    };

    await expect(runPass({ pool: relayPool, publisher, subscriptions: everything })).rejects.toThrow();
    const firstIds = publisher.accepted.map((j) => j.deduplicationId);
    expect(firstIds).toEqual(ids.map((id) => `${id}:all`));
    expect(await unfannedCount(t.pool)).toBe(5);
    // A crash is not the rows' fault, nor a transport outage.
    expect((await eventStates(t.pool)).every((r) => r.attempts === 0)).toBe(true);
    expect((await stats(t.pool)).relay.failures).toBe(0);

    publisher.afterAccept = undefined;
    const again = await runPass({ pool: relayPool, publisher, subscriptions: everything });
    expect(again).toMatchObject({ claimed: 5, fanned: 5 });
    expect(publisher.accepted.slice(5).map((j) => j.deduplicationId)).toEqual(firstIds);
    expect(await unfannedCount(t.pool)).toBe(0);
  });

  it("a pass whose process is killed after publishing leaves its rows claimable, and they republish with the same ids", async () => {
    const ids = await seedEvents(t.pool, 4);
    const script = fileURLToPath(new URL("../support/crash-pass.ts", import.meta.url));
    const child = spawn(process.execPath, ["--import", "tsx", script, t.url], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    let err = "";
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const signal = await new Promise<NodeJS.Signals | null>((resolve) =>
      child.on("exit", (_code, sig) => resolve(sig)),
    );
    expect(signal, err).toBe("SIGKILL");
    const publishedBeforeDeath = JSON.parse(out.trim()) as string[];
    expect(publishedBeforeDeath).toEqual(ids.map((id) => `${id}:all`));

    // The server notices the dead client and rolls its transaction back; until then
    // the rows are locked and SKIP LOCKED passes over them. Wait for the signal
    // that the backend is gone rather than sleeping.
    await waitFor(async () => {
      const { rows } = await t.pool.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
      );
      return rows[0].n === 0;
    }, 10_000);
    expect(await unfannedCount(t.pool)).toBe(4);
    const publisher = new RecordingPublisher();
    const pass = await runPass({ pool: t.pool, publisher, subscriptions: everything });
    expect(pass).toMatchObject({ claimed: 4, fanned: 4 });
    expect(publisher.accepted.map((j) => j.deduplicationId)).toEqual(publishedBeforeDeath);
  });
});
