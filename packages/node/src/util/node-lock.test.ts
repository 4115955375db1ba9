import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { lockNodeDirs } from './node-lock.js';

describe('lockNodeDirs', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-node-lock-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses a second holder of the same home or runtime dir, naming the key and the holder', async () => {
    const first = await lockNodeDirs({ home_path: join(dir, 'home'), runtime_path: join(dir, 'run') });
    expect((await readFile(join(dir, 'home', 'server.pid'), 'utf8')).trim()).toBe(String(process.pid));
    await expect(
      lockNodeDirs({ home_path: join(dir, 'home'), runtime_path: join(dir, 'other-run') }),
    ).rejects.toThrow(
      `another aenv server (pid ${process.pid}) is running with home_path ${join(dir, 'home')}`,
    );
    await expect(
      lockNodeDirs({ home_path: join(dir, 'other-home'), runtime_path: join(dir, 'run') }),
    ).rejects.toThrow(/running with runtime_path .*\/run;/);
    // The failed attempt released what it had taken: other-home is free.
    const other = await lockNodeDirs({ home_path: join(dir, 'other-home'), runtime_path: join(dir, 'run2') });
    await other.release();
    await first.release();
    const again = await lockNodeDirs({ home_path: join(dir, 'home'), runtime_path: join(dir, 'run') });
    await again.release();
  });

  it('takes one lock when home and runtime are the same dir', async () => {
    const held = await lockNodeDirs({ home_path: dir, runtime_path: `${dir}/` });
    await held.release();
  });
});
