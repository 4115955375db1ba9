/**
 * A second process for the contract tests: opens the repository described in argv[2] (JSON) and runs one
 * scenario, printing one JSON line per event on stdout.
 *   race:    waits for "go" on stdin, then creates+publishes a record named by `alias` (mode "create") or
 *            creates+publishes without alias and binds it afterwards (mode "bind").
 *   publish-and-hang: publishes `id` and stops forever after the first stored blob (the parent kills it).
 */
import { createInterface } from 'node:readline';
import { pino } from 'pino';
import { createSnapshotRepository, isRepositoryError, type SnapshotRepositoryOptions } from '../index.js';
import type { PublishInput } from '../repository.js';

interface ChildArgs {
  options: Omit<SnapshotRepositoryOptions, 'logger'>;
  scenario: 'race' | 'publish-and-hang';
  mode?: 'create' | 'bind';
  alias?: string;
  id?: string;
  input: PublishInput;
}

const say = (event: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(event)}\n`);

async function main(): Promise<void> {
  const args = JSON.parse(process.argv[2] ?? '{}') as ChildArgs;
  const repo = createSnapshotRepository({ ...args.options, logger: pino({ level: 'silent' }) });
  if (args.scenario === 'race') {
    await repo.list(); // open the repository before the start line
    say({ event: 'ready' });
    const lines = createInterface({ input: process.stdin });
    for await (const line of lines) if (line.trim() === 'go') break;
    lines.close();
    try {
      const source = { kind: 'sandbox' as const, sourceSandboxId: `child-${process.pid}` };
      const resources = { cpuCount: 1, memoryMB: 256, diskSizeMB: 1024 };
      const rec = await repo.create({
        source,
        resources,
        ...(args.mode === 'create' ? { alias: args.alias } : {}),
      });
      await repo.publish(rec.id, args.input);
      if (args.mode === 'bind') await repo.bindAlias(args.alias!, rec.id);
      say({ event: 'result', ok: true, id: rec.id });
    } catch (err) {
      say({
        event: 'result',
        ok: false,
        kind: isRepositoryError(err) ? err.reason : 'Other',
        message: (err as Error).message,
      });
    }
  } else {
    await repo.publish(args.id!, args.input, {
      onProgress: async (e) => {
        if (e.step !== 'blob-stored') return;
        say({ event: 'stored', name: e.name });
        await new Promise(() => {}); // hang here until killed
      },
    });
    say({ event: 'unexpected-finish' });
  }
  await repo.close();
}

main().catch((err) => {
  say({ event: 'crash', message: (err as Error).message });
  process.exitCode = 1;
});
