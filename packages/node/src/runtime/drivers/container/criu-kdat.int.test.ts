// CRIU's kernel-feature cache: after priming, a CRIU run loads it instead of probing the kernel again.
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { run } from '../../../util/exec.js';
import { KERNDAT_CACHE_FILE, primeKerndatCache } from './criu.js';

const CRIU = process.env.AENV_CRIU_PATH ?? '/var/lib/aenv/deps/criu/current/bin/criu';
const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe.skipIf(process.getuid?.() !== 0 || !existsSync(CRIU))('CRIU kernel-feature cache', () => {
  it('is installed (or kept by CRIU itself on a tmpfs /run) and then loaded by CRIU', async () => {
    const how = await primeKerndatCache(CRIU);
    expect(['native', 'installed']).toContain(how);
    // On a tmpfs /run, CRIU writes the cache on its first run; the second one must load it.
    for (let i = 0; i < 2; i++) {
      const dir = await mkdtemp(join(tmpdir(), 'aenv-kdat-'));
      dirs.push(dir);
      await run(CRIU, ['check', '-v4', '-o', join(dir, 'check.log')], { allowFailure: true });
      if (i === 1 || how === 'installed') {
        expect(await readFile(join(dir, 'check.log'), 'utf8')).toContain(
          `Loaded kdat cache from ${KERNDAT_CACHE_FILE}`,
        );
      }
    }
  });
});
