// Lazy restore (docs/runtime.md#lazy-restore): a node with runtime.lazy_restore_min_mib restores a checkpoint
// holding more memory than that through a `criu lazy-pages` daemon. The memory must come back intact (checked
// by a checksum of every page), a kill must leave no daemon behind, and a host that refuses userfaultfd must
// get an eager restore instead. Lazy restore needs vm.unprivileged_userfaultfd = 1: the file sets it for its
// node and puts the old value back at the end.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import { eventually, hostObjects, storeDir, strayHostObjects } from './harness.js';
import { describeNode } from './fixture.js';

const SYSCTL = '/proc/sys/vm/unprivileged_userfaultfd';
const setSysctl = (v: string) => writeFileSync(SYSCTL, `${v}\n`);
const HOLD = '/tmp/hold.py';
// Fills 256 MiB (two bytes of every page, varying per page), writes the sha256 of all of it to /tmp/sum, and
// again to /tmp/sum2 on SIGUSR1: the second read goes through every page after the restore. The signal goes
// to the pid it wrote, not through `pkill -f`: while pages are still being fetched, another process reading
// the restored one's /proc/<pid>/cmdline gets nothing (docs/runtime.md#lazy-restore).
const HOLD_SRC = `import hashlib, os, signal, time
buf = bytearray(256 << 20)
for i in range(0, len(buf), 4096):
    buf[i] = (i >> 12) & 255
    buf[i + 1] = 7
def put(path):
    with open(path + '.tmp', 'w') as f:
        f.write(hashlib.sha256(buf).hexdigest())
    os.rename(path + '.tmp', path)
signal.signal(signal.SIGUSR1, lambda *a: put('/tmp/sum2'))
with open('/tmp/hold.pid', 'w') as f:
    f.write(str(os.getpid()))
put('/tmp/sum')
while True:
    time.sleep(3600)
`;

describe('lazy restore from disk', () => {
  let before = '0';
  beforeAll(() => {
    before = readFileSync(SYSCTL, 'utf8').trim();
    setSysctl('1');
  });
  afterAll(() => setSysctl(before));

  const { server, track } = describeNode({
    name: 'lazyr',
    toml: '[orchestrator]\nresident_pause_grace_secs = 0',
    runtime: ['lazy_restore_min_mib = 128'],
  });
  const criuWork = () => join(server.runtimePath, 'criu-work');
  /** Whether the sandbox's running container was restored lazily (its daemon's log is in the restore work dir). */
  const restoredLazily = (id: string) => {
    const containers = hostObjects(server).runcContainers.filter((c) => c.startsWith(id));
    expect(containers).toHaveLength(1);
    return existsSync(join(criuWork(), containers[0] as string, 'restore', 'lazy-pages.log'));
  };
  /** PIDs of lazy-pages daemons working in this node's runtime dir. */
  const daemons = () =>
    readdirSync('/proc')
      .filter((e) => /^\d+$/.test(e))
      .filter((e) => {
        try {
          const argv = readFileSync(`/proc/${e}/cmdline`, 'utf8').split('\0');
          return argv.includes('lazy-pages') && argv.some((a) => a.startsWith(`${server.runtimePath}/`));
        } catch {
          return false;
        }
      });

  const holding = async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000 }));
    await sbx.files.write(HOLD, HOLD_SRC);
    await sbx.commands.run(`setsid nohup python3 ${HOLD} >/dev/null 2>&1 &`);
    await sbx.commands.run('for i in $(seq 600); do [ -e /tmp/sum ] && exit 0; sleep 0.1; done; exit 1', {
      timeoutMs: 120_000,
    });
    return sbx;
  };
  const pauseToDisk = async (sbx: Sandbox) => {
    expect(await sbx.betaPause()).toBe(true);
    expect(existsSync(join(storeDir(server), 'paused', sbx.sandboxId, 'complete'))).toBe(true);
    await eventually(
      () => !hostObjects(server).runcContainers.some((c) => c.startsWith(sbx.sandboxId)),
      `the memory of ${sbx.sandboxId} to be released`,
    );
  };
  const memoryIntact = async (sbx: Sandbox) => {
    const r = await sbx.commands.run(
      'rm -f /tmp/sum2; kill -USR1 "$(cat /tmp/hold.pid)"; for i in $(seq 600); do [ -e /tmp/sum2 ] && break; sleep 0.1; done; cat /tmp/sum; echo; cat /tmp/sum2',
      { timeoutMs: 120_000 },
    );
    const [sum, again] = r.stdout.trim().split('\n');
    expect(sum).toMatch(/^[0-9a-f]{64}$/);
    expect(again).toBe(sum);
  };

  it('resumes a sandbox holding 256 MB lazily: commands work and every page reads back the same', async () => {
    const sbx = await holding();
    for (let round = 0; round < 2; round++) {
      await pauseToDisk(sbx);
      await sbx.connect();
      expect((await sbx.commands.run('echo ok')).stdout).toBe('ok\n');
      // Each round is a new container (<id>-rN) restored lazily; its daemon exits once every page is in.
      expect(restoredLazily(sbx.sandboxId)).toBe(true);
      await memoryIntact(sbx);
      await eventually(() => daemons().length === 0, 'the lazy-pages daemon to finish', 600, 100);
    }
  });

  it('restores an idle sandbox (below the threshold) eagerly', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000 }));
    await sbx.files.write('/tmp/mark', 'kept');
    await pauseToDisk(sbx);
    await sbx.connect();
    expect(await sbx.files.read('/tmp/mark')).toBe('kept');
    expect(restoredLazily(sbx.sandboxId)).toBe(false);
  });

  it('a kill right after a lazy resume leaves no daemon and no host object', async () => {
    const sbx = await holding();
    await pauseToDisk(sbx);
    await sbx.connect();
    await sbx.kill();
    expect(daemons()).toEqual([]);
    await eventually(() => {
      const o = hostObjects(server);
      return (
        !o.runcContainers.some((c) => c.startsWith(sbx.sandboxId)) &&
        !o.mounts.some((m) => m.includes(sbx.sandboxId)) &&
        !readdirSync(criuWork()).some((id) => id.startsWith(sbx.sandboxId))
      );
    }, `the host objects of ${sbx.sandboxId} to be gone`);
  });

  it('a server crash while pages are fetched: the daemon finishes on its own, the memory is intact after the restart', async () => {
    const sbx = await holding();
    await pauseToDisk(sbx);
    await sbx.connect();
    await server.crash();
    await eventually(
      () => daemons().length === 0,
      'the lazy-pages daemon to finish without its server',
      600,
      100,
    );
    await server.restart();
    expect(await strayHostObjects(server)).toEqual([]);
    await memoryIntact(sbx);
  });

  it('falls back to an eager restore, with a log line, when the kernel refuses userfaultfd', async () => {
    const sbx = await holding();
    await pauseToDisk(sbx);
    setSysctl('0');
    try {
      await sbx.connect();
    } finally {
      setSysctl('1');
    }
    expect(server.logs()).toContain('lazy restore failed; restoring eagerly');
    expect(restoredLazily(sbx.sandboxId)).toBe(false);
    expect(daemons()).toEqual([]);
    expect((await sbx.commands.run('echo ok')).stdout).toBe('ok\n');
    await memoryIntact(sbx);
  });
});
