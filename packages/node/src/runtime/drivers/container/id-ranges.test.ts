import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  assertLayout,
  assertNoSubidCollision,
  assertSandboxRange,
  blockOf,
  parseSubidFile,
  rangeOfBlock,
  spanEnd,
} from './id-ranges.js';

const L = { start: 100000, size: 65536, count: 4 };

describe('uid span layout', () => {
  it('puts the image range first and the sandbox ranges after it, back to back', () => {
    expect(rangeOfBlock(L, 1)).toEqual({ hostStart: 165536, size: 65536 });
    expect(rangeOfBlock(L, 4)).toEqual({ hostStart: 100000 + 4 * 65536, size: 65536 });
    expect(spanEnd(L)).toBe(100000 + 5 * 65536);
    expect(blockOf(L, 100000)).toBe(0);
    expect(blockOf(L, 165535)).toBe(0);
    expect(blockOf(L, 165536)).toBe(1);
    expect(blockOf(L, 165536 + 65535)).toBe(1);
    expect(blockOf(L, 99999)).toBeUndefined();
    expect(blockOf(L, spanEnd(L))).toBeUndefined();
  });

  it('accepts exactly the sandbox ranges', () => {
    for (let b = 1; b <= 4; b++) expect(() => assertSandboxRange(L, rangeOfBlock(L, b), 'x')).not.toThrow();
    for (const r of [
      undefined,
      { hostStart: 100000, size: 65536 },
      { hostStart: 165537, size: 65536 },
      { hostStart: 165536, size: 65535 },
      { hostStart: spanEnd(L), size: 65536 },
      { hostStart: 0, size: 65536 },
    ]) {
      expect(() => assertSandboxRange(L, r, 'sandbox s1')).toThrow(/sandbox s1: uid range .* is not one of/);
    }
  });

  it('refuses a span past 2^32 - 1', () => {
    expect(() => assertLayout({ start: 2 ** 32 - 65536 * 2, size: 65536, count: 2 })).toThrow(
      /must stay below/,
    );
    expect(() => assertLayout({ start: 2 ** 32 - 65536 * 3 - 1, size: 65536, count: 2 })).not.toThrow();
    expect(() => assertLayout({ start: 100000, size: 65536, count: 0 })).toThrow(/ranges >= 1/);
  });
});

describe('/etc/subuid and /etc/subgid', () => {
  let dir: string;
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('parses name:start:count lines, skipping comments, blanks and junk', () => {
    expect(parseSubidFile('/f', '# c\n\nalice:100000:65536\n  1000:231072:65536 \nbroken\nx:y:z\n')).toEqual([
      { file: '/f', line: 3, text: 'alice:100000:65536', start: 100000, count: 65536 },
      { file: '/f', line: 4, text: '1000:231072:65536', start: 231072, count: 65536 },
    ]);
  });

  it('refuses an overlapping entry anywhere in the span and names it; neighbours and missing files are fine', async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-subid-'));
    const f = join(dir, 'subuid');
    const end = spanEnd(L);
    const overlapping = [`a:${L.start}:1`, `a:${end - 1}:1`, `a:1:${L.start}`, `a:${L.start + 70000}:5`];
    for (const entry of overlapping) {
      await writeFile(f, `ok:1:1\n${entry}\n`);
      await expect(assertNoSubidCollision(L, [join(dir, 'missing'), f])).rejects.toThrow(
        `${f} line 2 "${entry}"`,
      );
    }
    await writeFile(f, `a:1:${L.start - 1}\nb:${end}:65536\n`);
    await expect(assertNoSubidCollision(L, [f, join(dir, 'missing')])).resolves.toBeUndefined();
  });
});
