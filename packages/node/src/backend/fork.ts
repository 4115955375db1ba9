// Fork: one memory checkpoint (and disk capture) of the running source, left running, launched into every child
// with its own slot, id and tokens.
import { randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { BeforeInstanceStart, ForkChildResult } from '../orchestrator/backend.js';
import type { SandboxRecord } from '../orchestrator/types.js';
import { containerIdOf, policyOf, stateOf, type BackendContext } from './context.js';
import { launchSaved } from './launch.js';
import { phase } from '../util/phases.js';

export async function forkSandbox(
  ctx: BackendContext,
  source: SandboxRecord,
  children: readonly SandboxRecord[],
  beforeStart?: (child: SandboxRecord) => BeforeInstanceStart | undefined,
): Promise<ForkChildResult[]> {
  const { o, dirs } = ctx;
  const state = stateOf(ctx, source);
  const work = join(dirs.root, 'forks', randomUUID());
  await mkdir(work, { recursive: true, mode: 0o711 });
  try {
    await phase('checkpoint', () =>
      o.runtime.checkpoint(containerIdOf(ctx, source), join(work, 'memory'), {
        leaveRunning: true,
        diskDest: join(work, 'disk'),
      }),
    );
    const currentToken = source.secure ? o.envdToken(source.id) : undefined;
    return await Promise.all(
      children.map(async (child): Promise<ForkChildResult> => {
        try {
          const start = await launchSaved(
            ctx,
            child,
            { ...state },
            policyOf(child),
            { memory: join(work, 'memory'), disk: join(work, 'disk'), currentId: source.id, currentToken },
            beforeStart?.(child),
          );
          return { ok: true, start };
        } catch (err) {
          return { ok: false, error: err instanceof Error ? err : new Error(String(err)) };
        }
      }),
    );
  } finally {
    await dirs.discardWorkDir(work);
  }
}
