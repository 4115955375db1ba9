// `aenv snapshot create|list|delete`: a running sandbox's memory and disk, kept as a template to start from.
import type { Command } from 'commander';
import type { SnapshotInfo } from '@aenv/protocol';
import { clientAction, withGlobalFlags } from '../client/context.js';
import type { Column } from '../client/output.js';
import { allPages } from './sandboxes.js';

const SNAPSHOT_COLUMNS: Column<SnapshotInfo>[] = [
  { header: 'ID', value: (s) => s.snapshotID },
  { header: 'NAMES', value: (s) => s.names.join(', ') },
  { header: 'CPU', value: (s) => s.cpuCount },
  { header: 'MEMORY MB', value: (s) => s.memoryMB },
  { header: 'DISK MB', value: (s) => s.diskSizeMB },
  { header: 'CREATED', value: (s) => s.createdAt },
];

export function registerSnapshotCommands(program: Command): void {
  const snapshot = program
    .command('snapshot')
    .alias('snap')
    .description('snapshots of sandboxes (start one with `aenv start <snapshot id or name>`)');

  withGlobalFlags(
    snapshot
      .command('create')
      .argument('<id>', 'sandbox id')
      .description('snapshot a running sandbox (it keeps running)')
      .option('--name <name>', 'a name to start it by'),
  ).action(
    clientAction(async (ctx, id: string, f: { name?: string }) => {
      const s = await ctx
        .progress()
        .run(`snapshotting ${id}`, () => ctx.api.sandboxes.snapshot(id, f.name ? { name: f.name } : {}));
      ctx.out.done(s, s.snapshotID);
    }),
  );

  withGlobalFlags(
    snapshot
      .command('list')
      .alias('ls')
      .description('list snapshots')
      .option('--sandbox-id <id>', 'only snapshots of this sandbox'),
  ).action(
    clientAction(async (ctx, f: { sandboxId?: string }) => {
      const rows = await allPages((nextToken) =>
        ctx.api.snapshots.list({
          limit: 100,
          ...(f.sandboxId ? { sandboxID: f.sandboxId } : {}),
          ...(nextToken ? { nextToken } : {}),
        }),
      );
      ctx.out.list(rows, SNAPSHOT_COLUMNS);
    }),
  );

  withGlobalFlags(
    snapshot
      .command('delete')
      .alias('rm')
      .argument('<id>', 'snapshot id or name')
      .description('delete a snapshot'),
  ).action(
    clientAction(async (ctx, id: string) => {
      await ctx.api.snapshots.delete(id);
      ctx.out.done({ snapshotID: id, deleted: true }, `deleted ${id}`);
    }),
  );
}
