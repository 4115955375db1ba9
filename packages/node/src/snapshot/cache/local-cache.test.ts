import { randomBytes, createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalBlobCache } from './local-cache.js';

const logger = pino({ level: 'silent' });
const blob = (size: number) => {
  const data = randomBytes(size);
  return { data, digest: `sha256:${createHash('sha256').update(data).digest('hex')}` };
};

describe('LocalBlobCache', () => {
  let root: string;
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'aenv-cache-test-'));
  });
  afterEach(() => rm(root, { recursive: true, force: true }));

  it('fills once per digest (single-flight) and serves hits from disk', async () => {
    const cache = new LocalBlobCache({ root, maxBytes: 1 << 20, minEvictAgeMs: 0, logger });
    const b = blob(1000);
    let fills = 0;
    const fill = async (tmp: string) => {
      fills++;
      await new Promise((r) => setTimeout(r, 20));
      await writeFile(tmp, b.data);
    };
    const paths = await Promise.all([
      cache.get(b.digest, 1000, fill),
      cache.get(b.digest, 1000, fill),
      cache.get(b.digest, 1000, fill),
    ]);
    expect(new Set(paths).size).toBe(1);
    expect(fills).toBe(1);
    expect((await readFile(paths[0]!)).equals(b.data)).toBe(true);
    await cache.get(b.digest, 1000, fill);
    expect(fills).toBe(1);
  });

  it('evicts the least recently used entries above the bound, and re-indexes after a restart', async () => {
    const cache = new LocalBlobCache({ root, maxBytes: 2500, minEvictAgeMs: 0, logger });
    const [a, b, c] = [blob(1000), blob(1000), blob(1000)];
    const put = (x: typeof a, k = cache) => k.get(x.digest, 1000, (tmp) => writeFile(tmp, x.data));
    const pa = await put(a);
    const pb = await put(b);
    await put(a);
    const pc = await put(c);
    expect([existsSync(pa), existsSync(pb), existsSync(pc)]).toEqual([true, false, true]);
    expect(cache.sizeBytes).toBe(2000);
    const again = new LocalBlobCache({ root, maxBytes: 2500, minEvictAgeMs: 0, logger });
    await again.init();
    expect(again.sizeBytes).toBe(2000);
    expect(again.has(a.digest) && again.has(c.digest) && !again.has(b.digest)).toBe(true);
  });

  it('never evicts entries used within minEvictAgeMs (it may exceed the bound instead)', async () => {
    const cache = new LocalBlobCache({ root, maxBytes: 1500, minEvictAgeMs: 60_000, logger });
    const [a, b] = [blob(1000), blob(1000)];
    const pa = await cache.get(a.digest, 1000, (tmp) => writeFile(tmp, a.data));
    const pb = await cache.get(b.digest, 1000, (tmp) => writeFile(tmp, b.data));
    expect([existsSync(pa), existsSync(pb)]).toEqual([true, true]);
    expect(cache.sizeBytes).toBe(2000);
  });

  it('rejects a fill of the wrong size and leaves nothing behind', async () => {
    const cache = new LocalBlobCache({ root, maxBytes: 1 << 20, minEvictAgeMs: 0, logger });
    const a = blob(1000);
    await expect(cache.get(a.digest, 999, (tmp) => writeFile(tmp, a.data))).rejects.toMatchObject({
      reason: 'IntegrityMismatch',
    });
    expect(cache.has(a.digest)).toBe(false);
    await expect(cache.get(a.digest, 1000, () => Promise.reject(new Error('network down')))).rejects.toThrow(
      'network down',
    );
    const { readdir } = await import('node:fs/promises');
    expect(await readdir(cache.tmpDir)).toEqual([]);
    expect(await readdir(cache.blobsDir)).toEqual([]);
  });
});
