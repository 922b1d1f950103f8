import { describe, expect, it } from "vitest";
import { activateSupplier } from "../../src/domain/suppliers/activate.ts";
import { connectSupplier } from "../../src/domain/suppliers/connect.ts";
import { createSupplier } from "../../src/domain/suppliers/create.ts";
import { getSupplier } from "../../src/domain/suppliers/get.ts";
import { IllegalTransitionError, NotFoundError } from "../../src/domain/errors.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventsAbout } from "../support/helpers.ts";

const t = useTestDatabase();
const missing = "00000000-0000-4000-8000-000000000000";

async function eventCount(): Promise<number> {
  const { rows } = await t.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM events");
  return rows[0]!.n;
}

describe("suppliers use cases", () => {
  it("create → connect → activate, each committing its event with the change", async () => {
    const created = await createSupplier(t.db, { name: "Acme", scope: "tenant-1" });
    const connected = await connectSupplier(t.db, created.supplier.id);
    const activated = await activateSupplier(t.db, created.supplier.id);
    expect(activated.supplier).toMatchObject({ status: "active", scope: "tenant-1" });
    expect(activated.supplier.connectedAt).toBeInstanceOf(Date);
    expect(activated.supplier.activatedAt).toBeInstanceOf(Date);

    const recorded = await eventsAbout(t.pool, created.supplier.id);
    expect(recorded.map((e) => [e.type, e.scope, e.payload.status])).toEqual([
      ["supplier.created", "tenant-1", "created"],
      ["supplier.connected", "tenant-1", "connected"],
      ["supplier.activated", "tenant-1", "active"],
    ]);
    expect([created, connected, activated].map((r) => r.eventIds)).toEqual(recorded.map((e) => [e.id]));
  });

  it("refuses activate before connect and a second connect, recording nothing", async () => {
    const { supplier } = await createSupplier(t.db, { name: "Early" });
    const early = activateSupplier(t.db, supplier.id);
    await expect(early).rejects.toBeInstanceOf(IllegalTransitionError);
    await expect(early).rejects.toThrow(/it is created/);
    await connectSupplier(t.db, supplier.id);
    await expect(connectSupplier(t.db, supplier.id)).rejects.toMatchObject({
      code: "illegal_transition",
      from: "connected",
    });
    expect((await getSupplier(t.db, supplier.id)).status).toBe("connected");
    expect((await eventsAbout(t.pool, supplier.id)).map((e) => e.type)).toEqual([
      "supplier.created",
      "supplier.connected",
    ]);
  });

  it("answers not found for an unknown supplier", async () => {
    await expect(connectSupplier(t.db, missing)).rejects.toBeInstanceOf(NotFoundError);
    await expect(activateSupplier(t.db, missing)).rejects.toBeInstanceOf(NotFoundError);
  });

  it("a rolled-back write leaves no event: the caller's transaction aborts", async () => {
    const { supplier } = await createSupplier(t.db, { name: "Rollback" });
    await expect(
      t.db.transaction(async (tx) => {
        await connectSupplier(tx, supplier.id);
        throw new Error("abort after connect");
      }),
    ).rejects.toThrow("abort after connect");
    expect((await getSupplier(t.db, supplier.id)).status).toBe("created");
    expect((await eventsAbout(t.pool, supplier.id)).map((e) => e.type)).toEqual(["supplier.created"]);
  });

  it("a rolled-back write leaves no change: recording the event fails, so the status stays", async () => {
    const { supplier } = await createSupplier(t.db, { name: "Unrecordable" });
    await connectSupplier(t.db, supplier.id);
    await t.pool.query(`
      CREATE FUNCTION refuse_activated() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'events unavailable'; END $$;
      CREATE TRIGGER refuse_activated BEFORE INSERT ON events
        FOR EACH ROW WHEN (NEW.type = 'supplier.activated') EXECUTE FUNCTION refuse_activated();`);
    try {
      // Drizzle wraps the driver's error; the cause is Postgres' own message.
      await expect(activateSupplier(t.db, supplier.id)).rejects.toMatchObject({
        cause: { message: "events unavailable" },
      });
    } finally {
      await t.pool.query("DROP TRIGGER refuse_activated ON events; DROP FUNCTION refuse_activated();");
    }
    expect((await getSupplier(t.db, supplier.id)).status).toBe("connected");
    expect((await eventsAbout(t.pool, supplier.id)).map((e) => e.type)).toEqual([
      "supplier.created",
      "supplier.connected",
    ]);
  });

  // Guarantee 1 from the other side: a change that fails to commit leaves no event.
  // The failure comes at COMMIT, after the use case has recorded its event, from a
  // deferred constraint trigger on the supplier's row; an event written anywhere but
  // in the change's own transaction would be committed already, and left behind.
  it.each([
    ["createSupplier", "created"],
    ["connectSupplier", "connected"],
    ["activateSupplier", "active"],
  ] as const)("%s records no event when its transaction fails at commit", async (useCase, to) => {
    const name = `Refused at commit: ${useCase}`;
    // The supplier a transition starts from; create's row is the change itself.
    const id = useCase === "createSupplier" ? undefined : (await createSupplier(t.db, { name })).supplier.id;
    if (useCase === "activateSupplier") await connectSupplier(t.db, id!);
    const before = await eventCount();
    await t.pool.query(`
      CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
      CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT OR UPDATE ON suppliers
        DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW WHEN (NEW.status = '${to}') EXECUTE FUNCTION refuse_at_commit();`);
    try {
      const run =
        useCase === "createSupplier"
          ? createSupplier(t.db, { name })
          : useCase === "connectSupplier"
            ? connectSupplier(t.db, id!)
            : activateSupplier(t.db, id!);
      await expect(run).rejects.toMatchObject({
        message: expect.stringMatching(/^Failed query: commit/),
        cause: { message: "refused at commit" },
      });
    } finally {
      await t.pool.query("DROP TRIGGER refuse_at_commit ON suppliers; DROP FUNCTION refuse_at_commit();");
    }
    expect(await eventCount()).toBe(before);
    const { rows } = await t.pool.query<{ status: string }>("SELECT status FROM suppliers WHERE name = $1", [
      name,
    ]);
    expect(rows.map((r) => r.status)).toEqual(
      { createSupplier: [], connectSupplier: ["created"], activateSupplier: ["connected"] }[useCase],
    );
  });

  it("each use case's event is written by the transaction that writes its change", async () => {
    // The same xmin: the supplier's row version and its event are one transaction's.
    const sameTransaction = async (id: string, eventId: string) => {
      const { rows } = await t.pool.query<{ same: boolean }>(
        `SELECT (SELECT xmin::text FROM suppliers WHERE id = $1) = (SELECT xmin::text FROM events WHERE id = $2) AS same`,
        [id, eventId],
      );
      return rows[0]!.same;
    };
    const created = await createSupplier(t.db, { name: "One transaction" });
    const id = created.supplier.id;
    expect(await sameTransaction(id, created.eventIds[0]!)).toBe(true);
    const connected = await connectSupplier(t.db, id);
    expect(await sameTransaction(id, connected.eventIds[0]!)).toBe(true);
    const activated = await activateSupplier(t.db, id);
    expect(await sameTransaction(id, activated.eventIds[0]!)).toBe(true);
  });

  it("two racing connects: one wins, the other is refused, one event", async () => {
    const { supplier } = await createSupplier(t.db, { name: "Raced" });
    const results = await Promise.allSettled([
      connectSupplier(t.db, supplier.id),
      connectSupplier(t.db, supplier.id),
    ]);
    expect(results.map((r) => r.status).sort()).toEqual(["fulfilled", "rejected"]);
    const rejected = results.find((r) => r.status === "rejected");
    expect(rejected?.reason).toBeInstanceOf(IllegalTransitionError);
    expect(
      (await eventsAbout(t.pool, supplier.id)).filter((e) => e.type === "supplier.connected"),
    ).toHaveLength(1);
  });
});
