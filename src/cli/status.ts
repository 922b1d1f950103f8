import { listAlerts, stats } from "../outbox/index.ts";
import { intOption, UsageError } from "./args.ts";
import type { Command } from "./command.ts";
import { formatAlerts, formatStats } from "./format.ts";

export async function alertsCommand({ pool, options, sub, print }: Command): Promise<number> {
  if (sub) throw new UsageError(`alerts takes no argument, got "${sub}"`);
  const found = await listAlerts(pool, {
    open: options.open,
    limit: intOption(options.limit, "--limit", 50),
  });
  print(found, () => formatAlerts(found));
  return 0;
}

export async function statsCommand({ pool, sub, print }: Command): Promise<number> {
  if (sub) throw new UsageError(`stats takes no argument, got "${sub}"`);
  const s = await stats(pool);
  print(s, () => formatStats(s));
  return 0;
}
