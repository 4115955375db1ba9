// Class "one sandbox's uid owns nothing of another's" (docs/security.md, "uid isolation"): every sandbox runs in
// a host uid/gid range of its own — fresh boots, pre-started (warm) ones, forks, snapshot and template launches,
// resumes from disk, across a server crash — so a file one sandbox writes (a setuid shell included) is owned on
// the host by ids no other sandbox has; and a span that overlaps /etc/subuid stops the server at startup.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, Template, waitForFile } from 'e2b';
import { REPO, startServer, strayHostObjects, useSdk, type TestServer } from '../e2e/harness.js';

const BASE = 'oci:/var/cache/aenv/images/base:latest';
const RUN = `u${Date.now().toString(36)}`;

interface Range {
  start: number;
  size: number;
}

/** The host range a sandbox's ids map to, read inside it; uid and gid maps must be the same one extent. */
async function rangeOf(sbx: Sandbox): Promise<Range> {
  const out = (await sbx.commands.run('cat /proc/self/uid_map /proc/self/gid_map')).stdout.trim().split('\n');
  expect(out).toHaveLength(2);
  const [uid, gid] = out.map((l) => l.trim().split(/\s+/).map(Number));
  expect(uid).toEqual(gid);
  expect(uid![0]).toBe(0);
  return { start: uid![1]!, size: uid![2]! };
}

const disjoint = (a: Range, b: Range) => a.start + a.size <= b.start || b.start + b.size <= a.start;
const inRange = (id: number, r: Range) => id >= r.start && id < r.start + r.size;

describe('per-sandbox uid ranges on a real node', () => {
  let server: TestServer;
  const ranges = new Map<string, Range>();

  /** The file `name` in /home/user of whichever sandbox wrote it, as the host sees it in the sandbox's upper. */
  const hostFile = (name: string) => {
    const dir = join(server.home, 'sandboxes');
    for (const e of readdirSync(dir)) {
      const p = join(dir, e, 'upper', 'home', 'user', name);
      if (!e.startsWith('.') && existsSync(p)) return statSync(p);
    }
    throw new Error(`no sandbox upper holds home/user/${name}`);
  };

  /** A sandbox whose range is recorded, after checking it shares no id with any recorded one. */
  const track = async (sbx: Sandbox) => {
    const r = await rangeOf(sbx);
    for (const [id, other] of ranges) {
      if (id !== sbx.sandboxId) expect(disjoint(r, other), `${sbx.sandboxId} vs ${id}`).toBe(true);
    }
    ranges.set(sbx.sandboxId, r);
    return r;
  };

  /** What a sandbox must still do in its range: write its user's old files, sudo, run envd commands. */
  const worksAsUser = async (sbx: Sandbox, file: string) => {
    await sbx.files.write(file, 'rewritten\n');
    const r = await sbx.commands.run(
      `stat -c %U:%G ${file}; whoami; sudo -n id -u; echo more >> ${file} && cat ${file}; touch ~/new && stat -c %U ~/new`,
    );
    expect(r.stdout).toBe(`user:user\nuser\n0\nrewritten\nmore\nuser\n`);
  };

  beforeAll(async () => {
    // One pre-started sandbox (the warm-pool path); no resident grace, so every resume restores from disk.
    server = await startServer({
      name: 'suid1',
      warm: 1,
      toml: '[orchestrator]\nresident_pause_grace_secs = 0',
    });
    useSdk(server);
  });
  afterAll(async () => {
    if (!server) return;
    try {
      await server.killAll();
      // The pre-started sandbox is the pool's, not a leak.
      expect((await strayHostObjects(server)).filter((s) => !s.includes('warm-'))).toEqual([]);
      const list = await server.api('GET', '/templates');
      for (const t of (list.body ?? []) as { templateID: string; names: string[] }[]) {
        if (t.names.some((n) => n.startsWith(RUN))) await server.api('DELETE', `/templates/${t.templateID}`);
      }
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  let a: Sandbox;
  let b: Sandbox;

  it('two sandboxes (one pre-started) have disjoint ranges; what each writes, a setuid shell too, is its own', async () => {
    a = await Sandbox.create({ timeoutMs: 600_000 });
    b = await Sandbox.create({ timeoutMs: 600_000 });
    const [ra, rb] = [await track(a), await track(b)];
    expect(ra.size).toBe(65536);
    for (const [sbx, own, other] of [
      [a, ra, rb],
      [b, rb, ra],
    ] as const) {
      const tag = `${RUN}-${sbx.sandboxId}`;
      // A user file, and a setuid-root copy of the shell planted with sudo: the classic way to own a host uid.
      const r = await sbx.commands.run(
        `echo mine > ~/${tag}.txt && sudo -n sh -c 'cp /bin/sh /home/user/${tag}.sh && chmod 4755 /home/user/${tag}.sh' && stat -c %u:%a ~/${tag}.sh`,
      );
      expect(r.stdout).toBe('0:4755\n');
      const file = hostFile(`${tag}.txt`);
      const shell = hostFile(`${tag}.sh`);
      expect([file.uid, file.gid]).toEqual([own.start + 1000, own.start + 1000]);
      expect([shell.uid, shell.mode & 0o7777]).toEqual([own.start, 0o4755]);
      for (const id of [file.uid, file.gid, shell.uid, shell.gid]) expect(inRange(id, other)).toBe(false);
    }
  });

  it('a fork and a snapshot launch get new ranges and work as before; so does a resume from disk', async () => {
    await a.files.write('/home/user/shared.txt', 'before');
    const [forked] = await a.fork({ count: 1, timeoutMs: 600_000 });
    if (!(forked instanceof Sandbox)) throw forked;
    await track(forked);
    expect(await forked.files.read('/home/user/shared.txt')).toBe('before');
    await worksAsUser(forked, '/home/user/shared.txt');

    const snap = await a.createSnapshot();
    const launched = await Sandbox.create(snap.snapshotId, { timeoutMs: 600_000 });
    await track(launched);
    await worksAsUser(launched, '/home/user/shared.txt');
    // The source's files are untouched by what its fork and launch did.
    expect(await a.files.read('/home/user/shared.txt')).toBe('before');

    // Paused to disk and restored: it keeps its own range.
    const before = ranges.get(forked.sandboxId);
    expect(await forked.betaPause()).toBe(true);
    const resumed = await Sandbox.connect(forked.sandboxId, { timeoutMs: 600_000 });
    expect(await rangeOf(resumed)).toEqual(before);
    await worksAsUser(resumed, '/home/user/shared.txt');
    await server.api('DELETE', `/templates/${snap.snapshotId}`);
  });

  it('template builds and launches of their memory and of their disk each get a range of their own', async () => {
    const t = Template()
      .fromImage(BASE)
      .runCmd('echo built > /home/user/built.txt && chown user:user /home/user/built.txt', { user: 'root' });
    const disk = await Template.build(t, `${RUN}-disk`, { cpuCount: 1, memoryMB: 512 });
    const memory = await Template.build(
      t.setStartCmd('sh -c "touch /tmp/started; exec sleep 100000"', waitForFile('/tmp/started')),
      `${RUN}-mem`,
      { cpuCount: 1, memoryMB: 512 },
    );
    for (const templateId of [disk.templateId, memory.templateId]) {
      const sbx = await Sandbox.create(templateId, { timeoutMs: 300_000 });
      await track(sbx);
      expect(await sbx.files.read('/home/user/built.txt')).toBe('built\n');
      await worksAsUser(sbx, '/home/user/built.txt');
    }
  });

  it('ranges are kept across a crash: running sandboxes keep theirs, new ones get others', async () => {
    await server.crash();
    server = await server.restart();
    useSdk(server);
    const listed = (await server.api('GET', '/v2/sandboxes')).body as { sandboxID: string; state: string }[];
    const running = listed.filter((s) => s.state === 'running' && ranges.has(s.sandboxID));
    expect(running.map((s) => s.sandboxID)).toEqual(expect.arrayContaining([a.sandboxId, b.sandboxId]));
    for (const s of running) {
      const again = await Sandbox.connect(s.sandboxID);
      expect(await rangeOf(again)).toEqual(ranges.get(s.sandboxID));
    }
    // Two more: a pre-started one and a fresh boot; neither may collide with a sandbox from before the crash.
    await track(await Sandbox.create({ timeoutMs: 300_000 }));
    await track(await Sandbox.create({ timeoutMs: 300_000 }));
  });
});

describe('a span overlapping /etc/subuid', () => {
  const name = 'suid2';
  const home = `/var/lib/aenv-e2e/${name}`;
  const runtime = `/run/aenv-e2e-${name}`;
  afterAll(() => {
    rmSync(home, { recursive: true, force: true });
    rmSync(runtime, { recursive: true, force: true });
  });

  it('makes the server refuse to start, naming the entry', async () => {
    mkdirSync(home, { recursive: true, mode: 0o711 });
    const subuid = join(home, 'subuid');
    writeFileSync(subuid, '# a host user with rootless containers\nalice:231072:65536\n');
    const config = join(home, 'test-config.toml');
    writeFileSync(
      config,
      [
        `home_path = "${home}"`,
        `runtime_path = "${runtime}"`,
        'deps_path = "/var/lib/aenv/deps"',
        `resource_prefix = "e${name}"`,
        'log_format = "json"',
        '[runtime]',
        'uid_map_host_start = 100000',
        'uid_ranges = 16',
      ].join('\n') + '\n',
    );
    // The server sees the file at /etc/subuid in a mount namespace of its own; the host's stays as it is.
    const cli = join(REPO, 'packages', 'cli', 'dist', 'main.js');
    const child = spawn(
      'unshare',
      [
        '--mount',
        '--propagation',
        'private',
        'sh',
        '-c',
        'mount --bind "$1" /etc/subuid && shift && exec "$@"',
        'sh',
        subuid,
        process.execPath,
        cli,
        'server',
        '--config',
        config,
      ],
      { env: { ...process.env, API_ADDR: '127.0.0.1:0' }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(code, output.slice(-3000)).toBe(1);
    expect(output).toContain('aenv server failed to start');
    expect(output).toContain(
      '/etc/subuid line 2 \\"alice:231072:65536\\" (ids 231072..296607); move runtime.uid_map_host_start past it',
    );
    expect(output).toContain('runtime.uid_map_host_start = 100000, uid_map_size = 65536, uid_ranges = 16');
  });
});
