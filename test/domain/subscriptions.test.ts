// The reference app's own subscription list, through the relay's pass: which
// subscriptions fold several events of one subject into one job is a promise to
// their handlers. A webhook endpoint and a mail are owed one delivery per fact;
// only the corpus index, which re-reads the note, may see just the latest.
import { beforeEach, describe, expect, it } from "vitest";
import { createNote } from "../../src/domain/notes/create.ts";
import { updateNote } from "../../src/domain/notes/update.ts";
import { subscriptions } from "../../src/domain/subscriptions.ts";
import { activateSupplier } from "../../src/domain/suppliers/activate.ts";
import { connectSupplier } from "../../src/domain/suppliers/connect.ts";
import { createSupplier } from "../../src/domain/suppliers/create.ts";
import { runPass } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventsAbout } from "../support/helpers.ts";
import { RecordingPublisher } from "../support/publishers.ts";
import { resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

/** Each accepted job of `subscription` as [event id, ids it covers], in publish order. */
const jobsOf = (publisher: RecordingPublisher, subscription: string) =>
  publisher.accepted
    .filter((j) => j.subscription === subscription)
    .map((j) => [j.body.event.id, j.body.coalesced] as const);

describe("the reference app's subscriptions, in one batch pass", () => {
  it("give notify.mail and webhook.fanout a job per event, and corpus.index one per note, for its latest", async () => {
    // Three events about one supplier and three about one note, written by the use
    // cases themselves, all waiting for the same pass.
    const { supplier } = await createSupplier(t.db, { name: "Acme" });
    await connectSupplier(t.db, supplier.id);
    await activateSupplier(t.db, supplier.id);
    const { note } = await createNote(t.db, { title: "first" });
    await updateNote(t.db, note.id, { title: "second" });
    await updateNote(t.db, note.id, { title: "third" });
    const supplierEvents = (await eventsAbout(t.pool, supplier.id)).map((e) => e.id);
    const noteEvents = (await eventsAbout(t.pool, note.id)).map((e) => e.id);
    expect(supplierEvents).toHaveLength(3);
    expect(noteEvents).toHaveLength(3);

    const publisher = new RecordingPublisher();
    // A batch pass is the one that coalesces (a rows pass never does).
    const pass = await runPass({ pool: t.pool, publisher, subscriptions });
    expect(pass).toMatchObject({ mode: "batch", claimed: 6, fanned: 6, failed: 0 });

    expect(jobsOf(publisher, "notify.mail")).toEqual(supplierEvents.map((id) => [id, []]));
    expect(jobsOf(publisher, "webhook.fanout")).toEqual(
      [...supplierEvents, ...noteEvents].map((id) => [id, []]),
    );
    expect(jobsOf(publisher, "corpus.index")).toEqual([[noteEvents[2], noteEvents.slice(0, 2)]]);
    expect(pass.jobs).toBe(3 + 6 + 1);
  });
});
