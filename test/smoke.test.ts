import { describe, expect, it } from "vitest";
import { useTestDatabase } from "./support/db.ts";

const t = useTestDatabase();

describe("test database", () => {
  it("is migrated and has the relay state row", async () => {
    const { rows } = await t.pool.query("SELECT failures FROM outbox_relay_state");
    expect(rows).toEqual([{ failures: 0 }]);
  });
});
