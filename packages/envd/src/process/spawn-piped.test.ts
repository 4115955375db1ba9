import { describe, expect, it } from 'vitest';
import { collectPiped as collect } from '../testing/collect-piped.js';
import { spawnPiped } from './spawn-piped.js';

describe('spawnPiped without the native helper (child_process fallback)', () => {
  it('runs with env, cwd, pipes and a new session', async () => {
    const child = await spawnPiped(
      undefined,
      '/bin/sh',
      ['-c', 'cat; echo "$X $(pwd)"; echo e >&2; ps -o sid= -p $$ 2>/dev/null || true; exit 4'],
      {
        env: { X: 'y', PATH: '/usr/bin:/bin' },
        cwd: '/tmp',
        stdin: true,
      },
    );
    child.stdin!.end('in\n');
    const r = await collect(child);
    expect(r.exit).toEqual({ code: 4, signal: null });
    expect(r.stdout.startsWith('in\ny /tmp\n')).toBe(true);
    expect(r.stderr).toBe('e\n');
  });

  it('gives /dev/null as stdin when asked and reports signals', async () => {
    const child = await spawnPiped(undefined, '/bin/sh', ['-c', 'cat; kill -TERM $$'], {
      env: {},
      cwd: '/',
      stdin: false,
    });
    expect(child.stdin).toBeNull();
    expect((await collect(child)).exit).toEqual({ code: null, signal: 'SIGTERM' });
  });

  it('rejects a missing executable', async () => {
    await expect(
      spawnPiped(undefined, '/no/such/file', [], { env: {}, cwd: '/', stdin: false }),
    ).rejects.toThrow(/ENOENT/);
  });
});
