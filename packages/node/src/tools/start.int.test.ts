// The tools mount built by a node's first start on a fresh host: under the server's umask (077) every
// directory a sandbox uid walks through to it must still be searchable, or no sandbox can start.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { startTools } from './start.js';

const deps = mkdtempSync(join(tmpdir(), 'aenv-tools-'));
afterAll(() => rmSync(deps, { recursive: true, force: true }));

describe('startTools on a deps dir without a tools dir yet', () => {
  it('leaves every directory from <deps>/tools down to the mount searchable by others, under umask 077', async () => {
    const previous = process.umask(0o077);
    let dir: string;
    try {
      ({ dir } = await startTools(
        { runtime: { tools_dir: '' }, deps_path: deps } as never,
        pino({ level: 'silent' }),
      ));
    } finally {
      process.umask(previous);
    }
    const toolsRoot = join(deps, 'tools');
    expect(statSync(toolsRoot).mode & 0o777).toBe(0o711);
    let path = toolsRoot;
    for (const part of relative(toolsRoot, dir).split('/')) {
      path = join(path, part);
      expect(statSync(path).mode & 0o001, path).toBe(0o001);
    }
    expect(statSync(join(dir, 'bin', 'node')).mode & 0o005).toBe(0o005);
  }, 180_000);
});
