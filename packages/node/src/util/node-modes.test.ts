import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { enforceNodeDirModes } from './node-modes.js';
import { makeReadOnlyForAll, privatizeTree } from './private-tree.js';

const mode = (p: string) => (statSync(p).mode & 0o7777).toString(8);

function put(path: string, m: number, content: string | null = 'x'): void {
  if (content === null) mkdirSync(path, { recursive: true });
  else {
    mkdirSync(join(path, '..'), { recursive: true });
    writeFileSync(path, content);
  }
  chmodSync(path, m);
}

describe('privatizeTree', () => {
  let base = '';
  beforeEach(() => {
    base = mkdtempSync(join(tmpdir(), 'aenv-modes-'));
  });
  afterEach(() => rmSync(base, { recursive: true, force: true }));

  it('takes group and other access away, strips setuid, keeps owner bits, follows no symlink', async () => {
    put(join(base, 't'), 0o755, null);
    put(join(base, 't/a'), 0o775, null);
    put(join(base, 't/a/f'), 0o644);
    put(join(base, 't/a/run'), 0o4755);
    put(join(base, 'outside'), 0o644);
    symlinkSync(join(base, 'outside'), join(base, 't/link'));
    expect(await privatizeTree(join(base, 't'))).toBe(4);
    expect(await privatizeTree(join(base, 't'))).toBe(0);
    expect([mode(join(base, 't')), mode(join(base, 't/a')), mode(join(base, 't/a/f'))]).toEqual([
      '700',
      '700',
      '600',
    ]);
    expect(mode(join(base, 't/a/run'))).toBe('700');
    expect(mode(join(base, 'outside'))).toBe('644');
  });

  it('follows the rules: a mode, self only, skip; keeps search bits when asked', async () => {
    put(join(base, 'r/content/file'), 0o644);
    put(join(base, 'r/skipped/file'), 0o644);
    put(join(base, 'r/images'), 0o711, null);
    put(join(base, 'r/images/img'), 0o644);
    chmodSync(join(base, 'r/content'), 0o755);
    await privatizeTree(join(base, 'r'), {
      keepSearch: true,
      rule: (p) =>
        p.endsWith('/r')
          ? 0o750
          : p.endsWith('/content')
            ? 'self'
            : p.endsWith('/skipped')
              ? 'skip'
              : 'descend',
    });
    expect(mode(join(base, 'r'))).toBe('750');
    expect([mode(join(base, 'r/content')), mode(join(base, 'r/content/file'))]).toEqual(['711', '644']);
    expect(mode(join(base, 'r/skipped/file'))).toBe('644');
    expect([mode(join(base, 'r/images')), mode(join(base, 'r/images/img'))]).toEqual(['711', '600']);
  });

  it('makeReadOnlyForAll: dirs 0755, files 0644 or 0755, never setuid or group-writable', async () => {
    put(join(base, 'tools/bin'), 0o700, null);
    put(join(base, 'tools/bin/node'), 0o4775);
    put(join(base, 'tools/VERSION'), 0o600);
    chmodSync(join(base, 'tools'), 0o700);
    await makeReadOnlyForAll(join(base, 'tools'));
    expect([mode(join(base, 'tools')), mode(join(base, 'tools/bin'))]).toEqual(['755', '755']);
    expect([mode(join(base, 'tools/bin/node')), mode(join(base, 'tools/VERSION'))]).toEqual(['755', '644']);
  });
});

describe('enforceNodeDirModes', () => {
  let base = '';
  beforeEach(() => {
    base = mkdtempSync(join(tmpdir(), 'aenv-node-'));
  });
  afterEach(() => rmSync(base, { recursive: true, force: true }));

  it('makes a node tree written with loose modes private, except where sandbox uids must pass', async () => {
    const home = join(base, 'home');
    const run = join(base, 'run');
    const deps = join(home, 'deps');
    for (const [p, m] of [
      ['state.db', 0o644],
      ['state.db-wal', 0o644],
      ['secrets/api-key', 0o644],
      ['snapshot-store/repository/layers/sha256/abc', 0o444],
      ['builds/b1.log', 0o644],
      ['image-cache/layers/v1/l1/usr/bin/sudo', 0o4755],
      ['sandboxes/sb1/disk/etc/passwd', 0o644],
      ['deps/checkpointer/current/bin/checkpointer', 0o755],
      ['deps/tools/v1/bin/node', 0o755],
      ['deps/tools/.native-x/addon.node', 0o644],
    ] as const)
      put(join(home, p), m);
    put(join(run, 'driver/driver.conf'), 0o644);
    for (const d of [home, join(home, 'secrets'), join(home, 'image-cache'), deps, join(deps, 'tools'), run])
      chmodSync(d, 0o755);
    await enforceNodeDirModes({
      home,
      runtime: run,
      deps,
      sandboxes: join(home, 'sandboxes'),
      contentRoots: [join(home, 'image-cache')],
    });
    expect(mode(home)).toBe('711');
    for (const p of ['state.db', 'state.db-wal', 'secrets/api-key', 'builds/b1.log'])
      expect(mode(join(home, p)), p).toBe('600');
    expect(mode(join(home, 'secrets'))).toBe('700');
    expect(mode(join(home, 'snapshot-store/repository/layers/sha256/abc'))).toBe('400');
    // Image and sandbox content keeps its modes; the dirs above it are the wall.
    expect(mode(join(home, 'image-cache'))).toBe('700');
    expect(mode(join(home, 'image-cache/layers/v1/l1/usr/bin/sudo'))).toBe('4755');
    expect(mode(join(home, 'sandboxes/sb1/disk/etc/passwd'))).toBe('644');
    expect([mode(deps), mode(join(deps, 'tools'))]).toEqual(['711', '711']);
    expect(mode(join(deps, 'checkpointer'))).toBe('700');
    expect(mode(join(deps, 'tools/v1/bin/node'))).toBe('755');
    expect(mode(join(deps, 'tools/.native-x/addon.node'))).toBe('600');
    expect([mode(run), mode(join(run, 'driver/driver.conf'))]).toEqual(['700', '600']);
  });
});
