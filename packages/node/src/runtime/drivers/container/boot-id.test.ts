import { afterEach, describe, expect, it } from 'vitest';
import {
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  chmodSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BOOT_ID_FILE, writeBootId } from './boot-id.js';

const UUID_LINE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$/;
const uid = process.getuid?.() ?? 0;

describe('writeBootId', () => {
  const dirs: string[] = [];
  const scratch = () => {
    const d = mkdtempSync(join(tmpdir(), 'aenv-bootid-'));
    dirs.push(d);
    return d;
  };
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('writes a new read-only id on every boot', async () => {
    const upper = scratch();
    await writeBootId(upper, [], uid);
    const first = readFileSync(join(upper, BOOT_ID_FILE), 'utf8');
    expect(first).toMatch(UUID_LINE);
    expect(lstatSync(join(upper, BOOT_ID_FILE)).mode & 0o777).toBe(0o444);
    expect(lstatSync(join(upper, 'run', 'agentenv')).mode & 0o777).toBe(0o700);
    await writeBootId(upper, [], uid);
    expect(readFileSync(join(upper, BOOT_ID_FILE), 'utf8')).not.toBe(first);
  });

  it("gives a made /run the image's owner and mode", async () => {
    const upper = scratch();
    const lower = scratch();
    mkdirSync(join(lower, 'run'));
    chmodSync(join(lower, 'run'), 0o751);
    await writeBootId(upper, [lower], uid);
    expect(lstatSync(join(upper, 'run')).mode & 0o7777).toBe(0o751);
  });

  it('replaces symlinks the sandbox left on its disk instead of following them', async () => {
    const outside = scratch();
    for (const planted of ['run', 'run/agentenv', BOOT_ID_FILE.slice(1)]) {
      const upper = scratch();
      const parts = planted.split('/');
      if (parts.length > 1) mkdirSync(join(upper, ...parts.slice(0, -1)), { recursive: true });
      symlinkSync(outside, join(upper, planted));
      await writeBootId(upper, [], uid);
      expect(readdirSync(outside), planted).toEqual([]);
      expect(lstatSync(join(upper, planted)).isSymbolicLink()).toBe(false);
      expect(readFileSync(join(upper, BOOT_ID_FILE), 'utf8')).toMatch(UUID_LINE);
    }
  });
});
