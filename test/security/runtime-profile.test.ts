// Hostile sandbox code against the runtime profile (docs/security.md, "hostile sandbox code"): a real node,
// attack code run inside sandboxes through the real e2b SDK, as root inside (sudo / user root) — root holds
// Docker's capabilities there, so what stops these calls is the seccomp filter, the capability set and the
// rlimits, not a missing privilege. Also the config keys that loosen the profile, and a profile that cannot
// be loaded (the node refuses to start).
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import { endNode, eventually, startServer, useSdk, type TestServer } from '../e2e/harness.js';

const EPERM = 1;
const ENOSYS = 38;

// Raw syscalls through ctypes (x86_64 numbers): [result, errno] of each, as JSON. A call that must never
// succeed and does (a fork with namespace flags) exits its child at once.
const ATTACKS = String.raw`
import ctypes, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return [r, ctypes.get_errno()]
def fn(f, *args):
    ctypes.set_errno(0)
    return [f(*args), ctypes.get_errno()]
def sock(*args):
    try:
        socket.socket(*args).close()
        return [0, 0]
    except OSError as e:
        return [-1, e.errno]
buf = ctypes.create_string_buffer(256)
out = {
    'keyctl': sc(250, 0, -1, 0),
    'add_key': sc(248, ctypes.c_char_p(b'user'), ctypes.c_char_p(b'k'), buf, 1, -2),
    'request_key': sc(249, ctypes.c_char_p(b'user'), ctypes.c_char_p(b'k'), 0, 0),
    'syslog': sc(103, 10, 0, 0),
    'mount': fn(libc.mount, b'none', b'/mnt', b'tmpfs', 0, None),
    'umount2': fn(libc.umount2, b'/proc', 2),
    'pivot_root': fn(libc.pivot_root, b'/tmp', b'/tmp'),
    'unshare_user': fn(libc.unshare, 0x10000000),
    'unshare_mount': fn(libc.unshare, 0x00020000),
    'unshare_net': fn(libc.unshare, 0x40000000),
    'setns': fn(libc.setns, os.open('/proc/self/ns/net', os.O_RDONLY), 0),
    'io_uring_setup': sc(425, 4, buf),
    'bpf': sc(321, 0, buf, 48),
    'perf_event_open': sc(298, buf, 0, -1, -1, 0),
    'userfaultfd': sc(323, 0),
    'open_by_handle_at': sc(304, -100, buf, 0),
    'kexec_load': sc(246, 0, 0, 0, 0),
    'init_module': sc(175, buf, 1, ctypes.c_char_p(b'')),
    'reboot': sc(169, 0xfee1dead, 0x28121969, 0x4321fedc, 0),
    'personality_no_aslr': sc(135, 0x0040000),
    'clone3': sc(435, buf, 88),
    'vsock': sock(40, socket.SOCK_STREAM),
    'raw_icmp': sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
    'packet': sock(17, socket.SOCK_RAW, 0),
}
r = libc.syscall(ctypes.c_long(56), ctypes.c_long(0x10000000 | 17), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
if r == 0:
    os._exit(0)
out['clone_newuser'] = [r, ctypes.get_errno()]
# What ordinary programs do still works.
pid = os.fork()
if pid == 0:
    os._exit(0)
out['fork'] = [os.waitpid(pid, 0)[1], 0]
out['inotify'] = fn(libc.inotify_init1, 0)
out['socket_tcp'] = sock(socket.AF_INET, socket.SOCK_STREAM)
out['chroot'] = fn(libc.chroot, b'/')
print(json.dumps(out))
`;

type Results = Record<string, [number, number]>;

async function attack(sbx: Sandbox, user: 'root' | 'user' = 'root'): Promise<Results> {
  await sbx.files.write('/tmp/attacks.py', ATTACKS, { user: 'root' });
  const r = await sbx.commands.run('python3 /tmp/attacks.py', { user });
  return JSON.parse(r.stdout) as Results;
}

describe('the runtime profile holds against hostile sandbox code', () => {
  let server: TestServer;
  let sbx: Sandbox;

  beforeAll(async () => {
    server = await startServer({ name: 'sprof1', toml: '[orchestrator]\nresident_pause_grace_secs = 0' });
    useSdk(server);
    sbx = await Sandbox.create({ timeoutMs: 600_000 });
  });
  afterAll(async () => {
    if (server) expect(await endNode(server)).toEqual({ stray: [], exitCode: 0 });
  });

  it("refuses Docker's denials to root inside: keyrings, syslog, mounts, namespaces, io_uring, bpf, raw sockets", async () => {
    const r = await attack(sbx);
    for (const call of ['keyctl', 'add_key', 'request_key', 'clone3'])
      expect(r[call], call).toEqual([-1, ENOSYS]);
    for (const call of [
      'syslog',
      'mount',
      'umount2',
      'pivot_root',
      'unshare_user',
      'unshare_mount',
      'unshare_net',
      'setns',
      'io_uring_setup',
      'bpf',
      'perf_event_open',
      'userfaultfd',
      'open_by_handle_at',
      'kexec_load',
      'init_module',
      'reboot',
      'personality_no_aslr',
      'vsock',
      'raw_icmp',
      'packet',
      'clone_newuser',
    ])
      expect(r[call], call).toEqual([-1, EPERM]);
    expect(r.fork).toEqual([0, 0]);
    expect(r.inotify![0]).toBeGreaterThanOrEqual(0);
    expect(r.socket_tcp).toEqual([0, 0]);
    expect(r.chroot).toEqual([0, 0]);
  });

  it('the same through the tools in the image: unshare, nsenter, mount, dmesg', async () => {
    const run = async (cmd: string, user: 'root' | 'user' = 'user') =>
      (await sbx.commands.run(`${cmd} 2>&1; echo rc=$?`, { user })).stdout;
    expect(await run('unshare -U true')).toMatch(/Operation not permitted[\s\S]*rc=1/);
    expect(await run('unshare -r true')).toMatch(/rc=1/);
    expect(await run('unshare -m true', 'root')).toMatch(/Operation not permitted[\s\S]*rc=1/);
    expect(await run('nsenter -t 1 -n true', 'root')).toMatch(/rc=1/);
    expect(await run('mount -t tmpfs none /mnt', 'root')).toMatch(
      /permission denied|not permitted[\s\S]*rc=32/i,
    );
    expect(await run('dmesg', 'root')).toMatch(/not permitted[\s\S]*rc=1/);
    expect(await run('sudo id -u')).toMatch(/^0\nrc=0/); // setuid still works (no_new_privileges off)
  });

  it('holds no NET_RAW, no core dumps, its own cgroup namespace, seccomp in every process', async () => {
    const status = (
      await sbx.commands.run('grep -E "^(CapBnd|CapEff|Seccomp|NoNewPrivs):" /proc/self/status', {
        user: 'root',
      })
    ).stdout;
    expect(status).toBe(
      'CapEff:\t00000000a80405fb\nCapBnd:\t00000000a80405fb\nNoNewPrivs:\t0\nSeccomp:\t2\n',
    );
    const core = await sbx.commands.run('ulimit -c; ulimit -Hc; ulimit -c 1000 2>&1; echo rc=$?', {
      user: 'root',
    });
    expect(core.stdout).toMatch(/^0\n0\n[\s\S]*rc=[12]\n$/);
    // A crashing process leaves no core file (it would hold its memory: tokens, keys).
    await sbx.commands.run('cd /tmp && python3 -c "import os; os.abort()"; true', { user: 'root' });
    expect((await sbx.commands.run('ls /tmp | grep -c core || true')).stdout.trim()).toBe('0');
    const cgroup = (await sbx.commands.run('cat /proc/self/cgroup')).stdout;
    expect(cgroup).not.toContain(server.prefix);
    expect(cgroup).not.toContain(sbx.sandboxId);
    for (const line of cgroup.trim().split('\n')) expect(line).toMatch(/:\/$/);
    const seccomp = await sbx.commands.run(
      'for p in /proc/[0-9]*; do grep -h "^Seccomp:" $p/status; done | sort -u',
      {
        user: 'root',
      },
    );
    expect(seccomp.stdout).toBe('Seccomp:\t2\n');
  });

  it('a process checkpointed under its filter and restored keeps it (pause to disk, resume)', async () => {
    const waiter = await sbx.commands.run(
      `python3 -c "
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
while not os.path.exists('/tmp/go'):
    time.sleep(0.1)
ctypes.set_errno(0)
libc.syscall(ctypes.c_long(250), ctypes.c_long(0), ctypes.c_long(-1), ctypes.c_long(0))
k = ctypes.get_errno()
ctypes.set_errno(0)
libc.unshare(0x10000000)
open('/tmp/after.tmp', 'w').write('%d %d' % (k, ctypes.get_errno()))
os.rename('/tmp/after.tmp', '/tmp/after')
"`,
      { background: true, user: 'root' },
    );
    await waiter.disconnect();
    expect(await sbx.betaPause()).toBe(true);
    expect((await server.api('GET', `/sandboxes/${sbx.sandboxId}`)).body).toMatchObject({
      pauseKind: 'memory',
    });
    sbx = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 });
    const status = (
      await sbx.commands.run(`grep -E "^(Seccomp|CapEff):" /proc/${waiter.pid}/status`, { user: 'root' })
    ).stdout;
    expect(status).toBe('CapEff:\t00000000a80405fb\nSeccomp:\t2\n');
    await sbx.commands.run('touch /tmp/go');
    await eventually(
      async () => (await sbx.commands.run('cat /tmp/after 2>/dev/null || true')).stdout !== '',
      'the restored process to try its calls',
    );
    expect((await sbx.commands.run('cat /tmp/after')).stdout).toBe(`${ENOSYS} ${EPERM}`);
    expect((await attack(sbx)).keyctl).toEqual([-1, ENOSYS]);
  });
});

describe('config keys that loosen the profile do what they say, and only that', () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startServer({
      name: 'sprof2',
      runtime: ['nested_containers = true', 'cap_net_raw = true', 'no_new_privileges = true'],
    });
    useSdk(server);
  });
  afterAll(async () => {
    if (server) expect(await endNode(server)).toEqual({ stray: [], exitCode: 0 });
  });

  it('nested_containers: user namespaces and mounts inside them; keyrings and io_uring stay refused', async () => {
    const sbx = await Sandbox.create({ timeoutMs: 300_000 });
    const nested = await sbx.commands.run(
      "unshare -Urm sh -c 'mount -t tmpfs none /mnt && touch /mnt/x && id -u && ls /mnt'",
    );
    expect(nested.stdout).toBe('0\nx\n');
    const r = await attack(sbx);
    expect(r.unshare_user).toEqual([0, 0]);
    expect(r.keyctl).toEqual([-1, ENOSYS]);
    for (const call of ['io_uring_setup', 'bpf', 'syslog', 'userfaultfd'])
      expect(r[call], call).toEqual([-1, EPERM]);
    // cap_net_raw: raw sockets for root inside.
    expect(r.raw_icmp).toEqual([0, 0]);
    // no_new_privileges: setuid binaries do nothing; root inside stays root.
    const sudo = await sbx.commands.run('sudo -n id -u 2>&1; echo rc=$?');
    expect(sudo.stdout).toMatch(/rc=1/);
    const status = (
      await sbx.commands.run('grep -E "^(NoNewPrivs|CapBnd):" /proc/self/status', { user: 'root' })
    ).stdout;
    expect(status).toBe('CapBnd:\t00000000a80425fb\nNoNewPrivs:\t1\n');
    await sbx.kill();
  });
});

describe('a seccomp profile that cannot be loaded', () => {
  // The node logs JSON: the quotes around the path come escaped.
  it('stops the node from starting (no fallback to a weaker filter), naming the key', async () => {
    const bad = '/tmp/aenv-sprof3-profile.json';
    writeFileSync(bad, '{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [');
    await expect(startServer({ name: 'sprof3', runtime: [`seccomp_profile = "${bad}"`] })).rejects.toThrow(
      /aenv server exited with 1[\s\S]*runtime\.seccomp_profile = \\"\/tmp\/aenv-sprof3-profile\.json\\": not a usable seccomp profile/,
    );
    await expect(
      startServer({ name: 'sprof3', runtime: ['seccomp_profile = "/nonexistent/seccomp.json"'] }),
    ).rejects.toThrow(/runtime\.seccomp_profile = \\"\/nonexistent\/seccomp\.json\\": cannot read it/);
  });
});
