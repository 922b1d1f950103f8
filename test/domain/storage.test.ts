import { describe, expect, it } from "vitest";
import { bytesText, storageText } from "../../src/domain/storage.ts";

describe("storage in words", () => {
  it("writes sizes in decimal units, one decimal under 100", () => {
    expect([0, 999, 1_000, 8_130, 99_949, 388_000_000, 1_234_567_890, 2e15].map(bytesText)).toEqual([
      "0 bytes",
      "999 bytes",
      "1.0 kB",
      "8.1 kB",
      "99.9 kB",
      "388 MB",
      "1.2 GB",
      "2000 TB",
    ]);
  });

  it("names the largest tables after the whole", () => {
    expect(
      storageText({
        bytes: 1_200_000_000,
        largest: [
          { table: "webhook_deliveries", bytes: 388_000_000 },
          { table: "events", bytes: 256_000_000 },
        ],
      }),
    ).toBe("1.2 GB; the largest tables: webhook_deliveries 388 MB, events 256 MB");
    expect(storageText({ bytes: 8_000_000, largest: [] })).toBe("8.0 MB");
  });
});
