// `aenv logs`, `aenv metrics`, `aenv nodes`: what a sandbox and the node report; `aenv node drain`.
import { Option, type Command } from 'commander';
import { AenvApiError, type SandboxLogEntry, type SandboxLogLevel, type SandboxMetric } from '@aenv/protocol';
import { clientAction, withGlobalFlags } from '../client/context.js';
import { renderJson, type Column } from '../client/output.js';
import { intIn } from '../client/parse.js';

const METRIC_COLUMNS: Column<SandboxMetric>[] = [
  { header: 'TIME', value: (m) => m.timestamp },
  { header: 'CPU %', value: (m) => m.cpuUsedPct.toFixed(1) },
  { header: 'CPUS', value: (m) => m.cpuCount },
  { header: 'MEM USED', value: (m) => m.memUsed },
  { header: 'MEM TOTAL', value: (m) => m.memTotal },
  { header: 'DISK USED', value: (m) => m.diskUsed },
  { header: 'DISK TOTAL', value: (m) => m.diskTotal },
];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface LogFlags {
  follow?: boolean;
  level?: SandboxLogLevel;
  limit?: number;
}

function logLine(e: SandboxLogEntry): string {
  return `${e.timestamp} ${e.level.toUpperCase().padEnd(5)} ${e.message}`;
}

export function registerObserveCommands(program: Command): void {
  withGlobalFlags(
    program
      .command('logs')
      .argument('<id>', 'sandbox id')
      .description("a sandbox's logs (lifecycle events and its envd's)")
      .option('-f, --follow', 'keep printing new lines until the sandbox ends (or Ctrl-C)')
      .addOption(new Option('--level <level>', 'minimum level').choices(['debug', 'info', 'warn', 'error']))
      .option('--limit <n>', 'at most this many lines per request', intIn(1, 1000)),
  ).action(
    clientAction(async (ctx, id: string, f: LogFlags) => {
      const query = { ...(f.level ? { level: f.level } : {}), ...(f.limit ? { limit: f.limit } : {}) };
      const first = await ctx.api.sandboxes.logs(id, { ...query, direction: 'forward' });
      if (!f.follow) {
        if (ctx.out.mode === 'json') ctx.out.raw(renderJson(first.logs) + '\n');
        else ctx.out.raw(first.logs.map((e) => logLine(e) + '\n').join(''));
        return;
      }
      // Followed: one line (text) or one JSON object per line. Entries share a millisecond, so the ones
      // already printed at the cursor's millisecond are remembered and skipped.
      const print = (e: SandboxLogEntry) =>
        ctx.out.raw((ctx.out.mode === 'json' ? JSON.stringify(e) : logLine(e)) + '\n');
      let cursor = 0;
      let atCursor = new Set<string>();
      const take = (logs: SandboxLogEntry[]) => {
        for (const e of logs) {
          const ms = Date.parse(e.timestamp);
          const key = JSON.stringify(e);
          if (ms < cursor || (ms === cursor && atCursor.has(key))) continue;
          if (ms > cursor) {
            cursor = ms;
            atCursor = new Set();
          }
          atCursor.add(key);
          print(e);
        }
      };
      take(first.logs);
      for (;;) {
        await sleep(1000);
        try {
          take((await ctx.api.sandboxes.logs(id, { ...query, direction: 'forward', cursor })).logs);
        } catch (e) {
          if (e instanceof AenvApiError && e.status === 404) {
            process.stderr.write(`sandbox ${id} ended\n`);
            return;
          }
          throw e;
        }
      }
    }),
  );

  withGlobalFlags(
    program
      .command('metrics')
      .argument('<id>', 'sandbox id')
      .description("a sandbox's CPU, memory and disk samples")
      .option('--since <secs>', 'only samples of the last this many seconds', intIn(1, 2_147_483_647)),
  ).action(
    clientAction(async (ctx, id: string, f: { since?: number }) => {
      const range = f.since !== undefined ? { start: Math.floor(Date.now() / 1000) - f.since } : {};
      ctx.out.list(await ctx.api.sandboxes.metrics(id, range), METRIC_COLUMNS);
    }),
  );

  withGlobalFlags(program.command('nodes').description('the nodes serving this API and their load')).action(
    clientAction(async (ctx) => {
      ctx.out.list(await ctx.api.nodes.list(), [
        { header: 'ID', value: (n) => n.id },
        { header: 'STATUS', value: (n) => n.status },
        { header: 'SANDBOXES', value: (n) => n.sandboxCount },
        { header: 'CPU %', value: (n) => n.metrics.cpuPercent },
        { header: 'CPUS', value: (n) => n.metrics.cpuCount },
        { header: 'MEM USED', value: (n) => n.metrics.memoryUsedBytes },
        { header: 'MEM TOTAL', value: (n) => n.metrics.memoryTotalBytes },
        { header: 'VERSION', value: (n) => n.version },
      ]);
    }),
  );

  const node = program.command('node').description('one node of a cluster');
  withGlobalFlags(
    node
      .command('drain')
      .argument(
        '<nodeID>',
        'the node, by its id in `aenv nodes` (through a gateway, any node of the cluster)',
      )
      .description(
        'stop placing sandboxes on the node and hand its sandboxes over to the shared repository; each resumes on another node at its next request',
      )
      .option(
        '--wait',
        'wait until the drain is done (every sandbox handed over, or kept when it mounts volumes only this node has), printing the progress',
      ),
  ).action(
    clientAction(async (ctx, nodeId: string, f: { wait?: boolean }) => {
      let progress = await ctx.api.nodes.drain(nodeId);
      while (f.wait && !progress.done) {
        await sleep(1000);
        progress = (await ctx.api.nodes.get(nodeId)).drain ?? progress;
      }
      ctx.out.done(
        progress,
        `node ${nodeId} ${progress.done ? 'drained' : 'draining'}: ${progress.handedOver} handed over, ${progress.failed} failed, ${progress.kept} kept, ${progress.running} running, ${progress.paused} paused`,
      );
    }),
  );
}
