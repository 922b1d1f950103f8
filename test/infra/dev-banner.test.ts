import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { devBanner, type DevBannerParts } from "../../infra/dev-banner.ts";

const embedded = "postgres://postgres:pg-secret@127.0.0.1:54329/postgres";
const parts: DevBannerParts = {
  publicUrl: "http://127.0.0.1:8787",
  sweepSeconds: 60,
  cron: "* * * * *",
  databaseUrl: embedded,
  databaseUrlGiven: false,
  proxyUrl: "ws://127.0.0.1:40000",
  pooledUrl: "postgres://postgres:pool-secret@127.0.0.1:40000/postgres",
  qstashUrl: "http://127.0.0.1:54331",
  sinkUrl: "http://127.0.0.1:54330",
  apiKeyScope: "dev",
  apiKey: "eo_devkey",
  adminTokenGiven: false,
  vars: {
    QSTASH_URL: "http://127.0.0.1:54331",
    QSTASH_TOKEN: "qstash_dev_x",
    PUBLIC_URL: "http://127.0.0.1:8787",
    ADMIN_TOKEN: "dev_admin_it's",
  },
};

/** The banner's line that starts with `label` (after its indent). */
const line = (banner: string, label: string) =>
  banner.split("\n").find((l) => l.trimStart().startsWith(label)) ?? "";

describe("npm run dev's banner", () => {
  // README's operator examples read $ADMIN_TOKEN; the banner had it only inside curl lines.
  it("exports ADMIN_TOKEN beside EO_KEY, in a line a shell runs as it reads", () => {
    const banner = devBanner(parts);
    const exports = banner
      .split("\n")
      .filter((l) => /^\s+export (EO_KEY|ADMIN_TOKEN)=/.test(l))
      .join("\n");
    const seen = execFileSync("bash", ["-c", `${exports}\nprintf '%s|%s' "$EO_KEY" "$ADMIN_TOKEN"`], {
      encoding: "utf8",
    });
    expect(seen).toBe("eo_devkey|dev_admin_it's");
  });

  it("names the dashboard's URL and that its password is ADMIN_TOKEN, and where that is kept", () => {
    expect(line(devBanner(parts), "dashboard")).toBe(
      "  dashboard      http://127.0.0.1:8787/dashboard   (password: ADMIN_TOKEN, in the export line below; kept in .dev/secrets.json)",
    );
    expect(line(devBanner({ ...parts, adminTokenGiven: true }), "dashboard")).toContain(
      "(password: ADMIN_TOKEN, in the export line below; yours, from the environment)",
    );
  });

  // Masked, the embedded server's URL was copied and refused (28P01), while the CLI
  // lines printed it in full.
  it("prints the embedded Postgres's URL as the CLI lines do, and hides only the password of one given", () => {
    const banner = devBanner(parts);
    expect(line(banner, "Postgres")).toBe(`  Postgres       ${embedded}`);
    expect(banner).toContain(`DATABASE_URL='${embedded}' npm run outbox -- events list`);
    const given = devBanner({
      ...parts,
      databaseUrl: "postgres://me:real-secret@db.example.com/app",
      databaseUrlGiven: true,
    });
    expect(line(given, "Postgres")).toBe(
      "  Postgres       postgres://me:***@db.example.com/app   (your DATABASE_URL, password hidden)",
    );
    expect(given).not.toContain("real-secret");
  });
});
