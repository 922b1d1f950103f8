import { listAlerts, stats } from "../outbox/index.ts";
import { intOption, UsageError } from "./args.ts";
import type { Command } from "./command.ts";
import { formatAlerts, formatStats } from "./format.ts";

export const alertsCommand: Command = ({ options, sub }) => {
  if (sub) throw new UsageError(`alerts takes no argument, got "${sub}"`);
  const limit = intOption(options.limit, "--limit", 50);
  return async ({ pool, print }) => {
    const found = await listAlerts(pool, { open: options.open, limit });
    print(found, () => formatAlerts(found));
    return 0;
  };
};

export const statsCommand: Command = ({ sub }) => {
  if (sub) throw new UsageError(`stats takes no argument, got "${sub}"`);
  return async ({ pool, print }) => {
    const s = await stats(pool);
    print(s, () => formatStats(s));
    return 0;
  };
};
