// One sandbox must not starve the others or the host (docs/security.md, "hostile sandbox code"): a real node
// with small budgets, sandboxes driven by the real e2b SDK that fork, open files and make inotify instances
// until the kernel refuses, and the host and the other sandboxes checked to still have theirs.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import { endNode, eventually, startServer, useSdk, type TestServer } from '../e2e/harness.js';

const NODE_PIDS = 100;
const NOFILE = 2048;
const INOTIFY_INSTANCES = 24;
const INOTIFY_WATCHES = 100;

// Forks children that sleep until the kernel refuses a fork (or 1000 of them): prints how many it made.
const FORKER = String.raw`
import os, time
n = 0
while n < 1000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    n += 1
print(n)
`;

// Makes inotify instances (then watches on one) until refused; holds them while /tmp/hold exists.
const INOTIFY = String.raw`
import ctypes, json, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fds, err = [], 0
for _ in range(1000):
    fd = libc.inotify_init1(0)
    if fd < 0:
        err = ctypes.get_errno()
        break
    fds.append(fd)
os.makedirs('/tmp/watched', exist_ok=True)
watches, werr = 0, 0
for i in range(1000):
    p = '/tmp/watched/%d' % i
    open(p, 'w').close()
    if libc.inotify_add_watch(fds[0], p.encode(), 0x2) < 0:
        werr = ctypes.get_errno()
        break
    watches += 1
open(sys.argv[1] + '.tmp', 'w').write(json.dumps({'instances': len(fds), 'errno': err, 'watches': watches, 'werrno': werr}))
os.rename(sys.argv[1] + '.tmp', sys.argv[1])
while os.path.exists('/tmp/hold'):
    time.sleep(0.2)
`;

const HOST_INOTIFY = String.raw`
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fds = [libc.inotify_init1(0) for _ in range(8)]
print(sum(1 for f in fds if f >= 0))
`;

describe('one sandbox cannot starve the others or the host', () => {
  let server: TestServer;
  const cg = (file: string, id?: string) =>
    readFileSync(`/sys/fs/cgroup/pids/${server.prefix}/${id ? `${id}/` : ''}${file}`, 'utf8').trim();

  beforeAll(async () => {
    server = await startServer({
      name: 'sstarv',
      runtime: [
        `node_pids_limit = ${NODE_PIDS}`,
        `nofile_limit = ${NOFILE}`,
        `inotify_max_instances = ${INOTIFY_INSTANCES}`,
        `inotify_max_watches = ${INOTIFY_WATCHES}`,
      ],
    });
    useSdk(server);
  });
  afterAll(async () => {
    if (server) expect(await endNode(server)).toEqual({ stray: [], exitCode: 0 });
  });

  it('forks stop at the node budget: two sandboxes at their limit together stay under it; the host forks on', async () => {
    const a = await Sandbox.create({ timeoutMs: 300_000 });
    const b = await Sandbox.create({ timeoutMs: 300_000 });
    // The node budget is the parent cgroup's; each sandbox's default is derived from it (at least 64).
    expect(cg('pids.max')).toBe(String(NODE_PIDS));
    expect([cg('pids.max', a.sandboxId), cg('pids.max', b.sandboxId)]).toEqual(['64', '64']);
    await a.files.write('/tmp/forker.py', FORKER);
    await b.files.write('/tmp/forker.py', FORKER);
    const madeA = Number((await a.commands.run('python3 /tmp/forker.py')).stdout.trim());
    const madeB = Number((await b.commands.run('python3 /tmp/forker.py')).stdout.trim());
    expect(madeA).toBeGreaterThan(20);
    expect(Number(cg('pids.current', a.sandboxId))).toBeLessThanOrEqual(64);
    // b met the node budget before its own limit: both together never exceed it.
    expect(Number(cg('pids.current'))).toBeLessThanOrEqual(NODE_PIDS);
    expect(
      Number(cg('pids.current', a.sandboxId)) + Number(cg('pids.current', b.sandboxId)),
    ).toBeLessThanOrEqual(NODE_PIDS);
    expect(madeB).toBeLessThan(madeA);
    expect(Number(/max (\d+)/.exec(cg('pids.events', b.sandboxId))?.[1])).toBeGreaterThan(0);
    // The host and the node are untouched.
    expect(
      spawnSync('sh', ['-c', 'for i in 1 2 3 4 5 6 7 8; do true & done; wait; echo ok']).stdout.toString(),
    ).toBe('ok\n');
    expect((await fetch(`${server.url}/health`)).status).toBe(204);
    await a.kill();
    await b.kill();
    // Once they are gone, the budget is free again for new sandboxes.
    const c = await Sandbox.create({ timeoutMs: 120_000 });
    expect((await c.commands.run('echo alive')).stdout).toBe('alive\n');
    await c.kill();
  });

  it('open files stop at nofile_limit in every process, and the sandbox cannot raise it', async () => {
    const sbx = await Sandbox.create({ timeoutMs: 300_000 });
    const r = await sbx.commands.run(
      `python3 -c "
import errno
fs = []
try:
    while len(fs) < 100000:
        fs.append(open('/dev/null'))
except OSError as e:
    print(len(fs), e.errno == errno.EMFILE)
"`,
    );
    const [count, emfile] = r.stdout.trim().split(' ');
    expect(emfile).toBe('True');
    expect(Number(count)).toBeGreaterThan(NOFILE - 16);
    expect(Number(count)).toBeLessThan(NOFILE);
    const limits = await sbx.commands.run(
      `ulimit -Sn; ulimit -Hn; ulimit -n ${NOFILE * 2} 2>&1; echo rc=$?`,
      {
        user: 'root',
      },
    );
    expect(limits.stdout).toMatch(new RegExp(`^${NOFILE}\\n${NOFILE}\\n[\\s\\S]*rc=[12]\\n$`));
    await sbx.kill();
  });

  it('inotify instances and watches stop at the per-sandbox limits; the host and the next sandbox keep theirs', async () => {
    const hog = await Sandbox.create({ timeoutMs: 300_000 });
    const other = await Sandbox.create({ timeoutMs: 300_000 });
    await hog.files.write('/tmp/inotify.py', INOTIFY);
    await other.files.write('/tmp/inotify.py', INOTIFY);
    await hog.commands.run('touch /tmp/hold');
    const held = await hog.commands.run('python3 /tmp/inotify.py /tmp/result', { background: true });
    await held.disconnect();
    await eventually(
      async () => (await hog.commands.run('cat /tmp/result 2>/dev/null || true')).stdout !== '',
      'the inotify hog to reach its limits',
    );
    const got = JSON.parse((await hog.commands.run('cat /tmp/result')).stdout) as Record<string, number>;
    expect(got).toEqual({ instances: INOTIFY_INSTANCES, errno: 24, watches: INOTIFY_WATCHES, werrno: 28 });
    // While it holds them: host root (whose count the kernel also charges) and another sandbox make theirs.
    expect(spawnSync('python3', ['-c', HOST_INOTIFY]).stdout.toString().trim()).toBe('8');
    await other.commands.run('rm -f /tmp/hold; python3 /tmp/inotify.py /tmp/result');
    const second = JSON.parse((await other.commands.run('cat /tmp/result')).stdout) as Record<string, number>;
    expect(second.instances).toBe(INOTIFY_INSTANCES);
    await hog.kill();
    await other.kill();
  });
});
