// aenv-init (native/aenv-init.c) as built by the host gcc: exec-as credentials, and the supervisor's
// restart, reaping and signal duties (as a child subreaper here; PID 1 is covered by the sandbox tests).
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const SOURCE = fileURLToPath(new URL('../../native/aenv-init.c', import.meta.url));
let dir: string;
let init: string;

beforeAll(() => {
  dir = mkdtempSync('/tmp/aenv-init-test-');
  init = join(dir, 'aenv-init');
  execFileSync('gcc', ['-static', '-Os', '-Wall', '-Werror', '-o', init, SOURCE]);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function children(pid: number): { pid: number; state: string }[] {
  let list: string;
  try {
    list = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
  } catch {
    return [];
  }
  return list
    ? list.split(/\s+/).flatMap((p) => {
        let stat: string;
        try {
          stat = readFileSync(`/proc/${p}/stat`, 'utf8');
        } catch {
          return []; // reaped between the two reads: it is no child any more
        }
        return [{ pid: Number(p), state: stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) }];
      })
    : [];
}

async function until(pred: () => boolean, tries = 200): Promise<boolean> {
  for (let i = 0; i < tries && !pred(); i++) await new Promise((r) => setTimeout(r, 50));
  return pred();
}

describe('aenv-init exec-as', () => {
  it('sets uid, gid, supplementary groups and the OOM score, then execs', () => {
    const r = spawnSync(
      init,
      [
        'exec-as',
        '1000',
        '1001',
        '1001,27,2000',
        '--oom-score-adj',
        '100',
        '--',
        'sh',
        '-c',
        'id -u; id -g; id -G; cat /proc/self/oom_score_adj',
      ],
      { encoding: 'utf8' },
    );
    expect(r.status).toBe(0);
    const [uid, gid, groups, oom] = r.stdout.trim().split('\n');
    expect(uid).toBe('1000');
    expect(gid).toBe('1001');
    expect(
      groups!
        .split(' ')
        .map(Number)
        .sort((a, b) => a - b),
    ).toEqual([27, 1001, 2000]);
    expect(oom).toBe('100');
  });

  it('drops all supplementary groups with "-"', () => {
    const r = spawnSync(init, ['exec-as', '1000', '1000', '-', '--', 'id', '-G'], { encoding: 'utf8' });
    expect(r.stdout.trim()).toBe('1000');
  });

  it('fails with 127 and a message on bad input', () => {
    for (const args of [
      ['exec-as', 'abc', '0', '-', '--', 'true'],
      ['exec-as', '0', '0', '1,x', '--', 'true'],
      ['exec-as', '0', '0', '-', 'true'],
      ['exec-as', '0', '0', '-', '--bogus', '--', 'true'],
    ]) {
      const r = spawnSync(init, args, { encoding: 'utf8' });
      expect(r.status).toBe(127);
      expect(r.stderr).toMatch(/aenv-init|usage/);
    }
    const missing = spawnSync(init, ['exec-as', '0', '0', '-', '--', '/no/such/binary'], {
      encoding: 'utf8',
    });
    expect(missing.status).toBe(127);
    expect(missing.stderr).toContain('No such file or directory');
  });
});

describe('aenv-init supervisor', () => {
  it('restarts a command that exits, with backoff', async () => {
    const log = join(dir, 'restarts.log');
    const child = spawn(init, ['supervise', '--', '/bin/sh', '-c', `echo run >> ${log}; exit 1`], {
      stdio: 'ignore',
    });
    const lines = () => {
      try {
        return readFileSync(log, 'utf8').split('\n').filter(Boolean).length;
      } catch {
        return 0;
      }
    };
    expect(await until(() => lines() >= 3)).toBe(true);
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    process.kill(child.pid!, 'SIGTERM');
    expect(await exited).toBe(0);
  });

  it('reaps orphans re-parented to it', async () => {
    const child = spawn(init, ['supervise', '--', '/bin/sh', '-c', 'sh -c "sleep 0.3 &"; exec sleep 30'], {
      stdio: 'ignore',
    });
    // The orphaned sleep shows up as a second child, then must disappear (not linger as a zombie).
    expect(await until(() => children(child.pid!).length === 2)).toBe(true);
    expect(await until(() => children(child.pid!).length === 1)).toBe(true);
    expect(children(child.pid!).every((c) => c.state !== 'Z')).toBe(true);
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    process.kill(child.pid!, 'SIGTERM');
    expect(await exited).toBe(128 + 15);
  });

  it('forwards SIGTERM and exits with the command status', async () => {
    const child = spawn(
      init,
      ['supervise', '--', '/bin/sh', '-c', 'trap "exit 7" TERM; while :; do sleep 0.05; done'],
      { stdio: 'ignore' },
    );
    expect(await until(() => children(child.pid!).length === 1)).toBe(true);
    await new Promise((r) => setTimeout(r, 200)); // let the shell install its trap
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    process.kill(child.pid!, 'SIGTERM');
    expect(await exited).toBe(7);
  });

  it('rejects unknown arguments', () => {
    expect(spawnSync(init, ['bogus']).status).toBe(127);
    expect(spawnSync(init, ['supervise', 'x']).status).toBe(127);
  });
});
