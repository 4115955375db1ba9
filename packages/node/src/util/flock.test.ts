import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { acquireFlock } from './flock.js';

describe('acquireFlock', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-flock-'));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('excludes other holders until released; shared holders coexist', async () => {
    const path = join(dir, 'x.lock');
    const held = await acquireFlock(path, 'exclusive', 5000);
    await expect(acquireFlock(path, 'exclusive', 200)).rejects.toThrow(/timed out after 200 ms/);
    await expect(acquireFlock(path, 'shared', 200)).rejects.toThrow(/timed out/);
    await held.release();
    const s1 = await acquireFlock(path, 'shared', 2000);
    const s2 = await acquireFlock(path, 'shared', 2000);
    await expect(acquireFlock(path, 'exclusive', 200)).rejects.toThrow(/timed out/);
    await s1.release();
    await s2.release();
    await (await acquireFlock(path, 'exclusive', 2000)).release();
  });

  it('is released when the holding process dies (no stale locks)', async () => {
    const path = join(dir, 'y.lock');
    // Another process takes the lock through the same mechanism, then is killed.
    const holder = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        '-e',
        `
      import { acquireFlock } from ${JSON.stringify(new URL('./flock.ts', import.meta.url).pathname)};
      await acquireFlock(${JSON.stringify(path)}, 'exclusive', 5000);
      console.log('held');
      setInterval(() => {}, 1000);
    `,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    await new Promise<void>((resolve) => holder.stdout.once('data', () => resolve()));
    await expect(acquireFlock(path, 'exclusive', 200)).rejects.toThrow(/timed out/);
    holder.kill('SIGKILL');
    await new Promise((r) => holder.once('close', r));
    const mine = await acquireFlock(path, 'exclusive', 10_000);
    await mine.release();
  });

  it('does not keep the process alive: a holder with nothing else to do exits, and the lock is free', async () => {
    const path = join(dir, 'z.lock');
    const holder = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        '-e',
        `
      import { acquireFlock } from ${JSON.stringify(new URL('./flock.ts', import.meta.url).pathname)};
      await acquireFlock(${JSON.stringify(path)}, 'exclusive', 5000);
      console.log('held');
    `,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    holder.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise((r) => holder.once('close', r));
    expect([code, out]).toEqual([0, 'held\n']);
    await (await acquireFlock(path, 'exclusive', 10_000)).release();
  });
});
