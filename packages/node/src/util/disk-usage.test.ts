import { describe, expect, it } from 'vitest';
import { mkdtempSync, mkdirSync, writeFileSync, linkSync, symlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { treeBytes } from './disk-usage.js';

describe('treeBytes', () => {
  it('counts allocated bytes of a tree, hard links once, symlink targets never', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aenv-du-'));
    try {
      const outside = mkdtempSync(join(tmpdir(), 'aenv-du-out-'));
      writeFileSync(join(outside, 'big'), Buffer.alloc(4 * 1024 * 1024, 1));
      const empty = await treeBytes(dir);
      mkdirSync(join(dir, 'a', 'b'), { recursive: true });
      writeFileSync(join(dir, 'a', 'b', 'f'), Buffer.alloc(1024 * 1024, 7));
      linkSync(join(dir, 'a', 'b', 'f'), join(dir, 'a', 'g'));
      symlinkSync(join(outside, 'big'), join(dir, 'link'));
      const bytes = await treeBytes(dir);
      expect(bytes - empty).toBeGreaterThanOrEqual(1024 * 1024);
      expect(bytes - empty).toBeLessThan(2 * 1024 * 1024);
      expect(await treeBytes(join(dir, 'missing'))).toBe(0);
      rmSync(outside, { recursive: true, force: true });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
