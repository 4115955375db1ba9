// Local host users against sandbox files and node state (docs/security.md, "local host users"): a real node,
// sandboxes driven by the real e2b SDK planting what a hostile sandbox plants, and a real unprivileged host
// user (`nobody`, through setpriv) trying to reach it. Also every file mode under the node's home after a run
// with pause to disk, resume and a snapshot, and a restart over a tree with an older version's modes.
import { spawnSync } from 'node:child_process';
import { chmodSync, lstatSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import { endNode, startServer, useSdk, type TestServer } from '../e2e/harness.js';

// [runtime].uid_map_host_start: the image range's root, the group of spare dirs until a sandbox takes one.
const IMAGE_ROOT_GID = 100000;

/** The host gid of a sandbox's root: the first id of its own range, as its runc config maps it. */
function sandboxRootGid(dir: string): number {
  const config = JSON.parse(readFileSync(join(dir, 'bundle/config.json'), 'utf8')) as {
    linux: { gidMappings: { containerID: number; hostID: number }[] };
  };
  return config.linux.gidMappings.find((m) => m.containerID === 0)!.hostID;
}

function asNobody(script: string, ...args: string[]): { code: number; out: string } {
  const r = spawnSync(
    'setpriv',
    [
      '--reuid=65534',
      '--regid=65534',
      '--clear-groups',
      '--inh-caps=-all',
      'sh',
      '-c',
      script,
      'sh',
      ...args,
    ],
    { encoding: 'utf8' },
  );
  return { code: r.status ?? -1, out: `${r.stdout}${r.stderr}` };
}

/** Runs `path` as nobody from a file descriptor root opened: whatever path a host user might have found. */
function execAsNobodyViaFd(path: string): string {
  const r = spawnSync(
    'sh',
    [
      '-c',
      'exec 3<"$1"; exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all /proc/self/fd/3',
      'sh',
      path,
    ],
    { encoding: 'utf8' },
  );
  return `${r.stdout}${r.stderr}`;
}

function mountOptions(mountPoint: string): string[] {
  const line = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.split(' ')[4] === mountPoint)
    .pop();
  return (line?.split(' ')[5] ?? '').split(',');
}

const octal = (m: number) => (m & 0o7777).toString(8);

/** The entries of `dir`, or none when it went away meanwhile. */
function readdirSyncIfThere(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

/**
 * Every entry under the node's home and runtime dirs that breaks the documented rules (docs/security.md):
 * owner-only everywhere, except home and sandboxes/ (0711), each sandbox dir (0710, group its own range's
 * root; a spare's the image range's), the search bit of CRIU image dirs below the 0700 .store; sandbox and
 * image content is not looked into.
 */
function modeViolations(server: TestServer): string[] {
  const bad: string[] = [];
  const sandboxes = join(server.home, 'sandboxes');
  // The node's background work (the release of a paused sandbox's container, trash) may remove an entry between
  // the listing and its stat: what is gone cannot be readable.
  const lstatIfThere = (path: string) => lstatSync(path, { throwIfNoEntry: false });
  const listIfThere = (dir: string) => (lstatIfThere(dir) ? readdirSyncIfThere(dir) : []);
  const check = (path: string, want: (mode: number, isDir: boolean) => boolean, what: string) => {
    const st = lstatIfThere(path);
    if (st && !want(st.mode, st.isDirectory())) bad.push(`${path} ${octal(st.mode)} (${what})`);
  };
  const ownerOnly = (m: number) => (m & 0o7077) === 0;
  type Rule = 'skip' | 'walk' | 'searchable' | 'images';
  const walk = (dir: string, rule: (path: string, name: string) => Rule, inherited: Rule = 'walk') => {
    for (const name of listIfThere(dir)) {
      const path = join(dir, name);
      const st = lstatIfThere(path);
      if (!st || st.isSymbolicLink()) continue;
      const r = rule(path, name);
      if (r === 'skip') continue;
      if (st.isDirectory()) {
        const allowed = r === 'walk' ? ownerOnly : (m: number) => (m & 0o7066) === 0;
        check(path, allowed, 'dir');
        walk(path, rule, r);
      } else if (st.dev === lstatIfThere(dir)?.dev) {
        // CRIU images: read by CRIU from inside the restored user namespace (under the 0700 .store).
        const allowed = inherited === 'images' ? (m: number) => (m & 0o7133) === 0 : ownerOnly;
        check(path, allowed, 'file');
      }
    }
  };
  check(server.home, (m) => octal(m) === '711', 'home');
  check(sandboxes, (m) => octal(m) === '711', 'sandboxes root');
  // The empty read-only stand-in for masked directories (runtime.md): root's, 0555, and empty.
  const masked = join(server.home, '.masked-empty');
  check(masked, (m) => octal(m) === '555', 'masked-dir stand-in');
  if (readdirSync(masked).length) bad.push(`${masked} is not empty`);
  if (lstatSync(masked).uid !== 0) bad.push(`${masked} is not root's`);
  walk(server.home, (path) => {
    if (path === sandboxes || path === join(server.home, 'image-cache') || path === masked) return 'skip';
    return 'walk';
  });
  check(join(server.home, 'image-cache'), ownerOnly, 'image cache');
  for (const name of readdirSync(sandboxes)) {
    const path = join(sandboxes, name);
    const entry = lstatIfThere(path);
    if (name.startsWith('.trash-') || !entry?.isDirectory()) continue;
    if (!name.startsWith('.') || name.startsWith('.spare-')) {
      const st = entry;
      const spare = name.startsWith('.spare-');
      let gid: number;
      try {
        gid = spare ? IMAGE_ROOT_GID : sandboxRootGid(path);
      } catch (err) {
        if (!lstatIfThere(path)) continue;
        throw err;
      }
      if (!spare && gid === IMAGE_ROOT_GID) bad.push(`${path} runs in the image range`);
      if (octal(st.mode) !== '710' || st.uid !== 0 || st.gid !== gid)
        bad.push(`${path} ${octal(st.mode)} ${st.uid}:${st.gid} (sandbox dir, want 0:${gid})`);
      // l/<n>: read-only idmapped views of the shared image layers (their modes are the image's).
      const sandboxOwned = new Set(['upper', 'work', 'rootfs', 'sys', 'l']);
      walk(path, (p, n) => (p === join(path, n) && sandboxOwned.has(n) ? 'skip' : 'walk'));
      continue;
    }
    check(path, ownerOnly, 'store dir');
    walk(path, (_p, n) => (n === 'upper' ? 'skip' : n === 'memory' ? 'images' : 'searchable'));
  }
  check(server.runtimePath, ownerOnly, 'runtime dir');
  walk(server.runtimePath, () => 'walk');
  return bad;
}

describe('local host users cannot reach sandbox files or node state', () => {
  let server: TestServer;
  let sbx: Sandbox;
  let dir: string;

  beforeAll(async () => {
    server = await startServer({ name: 'shost1', toml: '[orchestrator]\nresident_pause_grace_secs = 0' });
    useSdk(server);
    sbx = await Sandbox.create({ timeoutMs: 600_000 });
    dir = join(server.home, 'sandboxes', sbx.sandboxId);
    // What a hostile sandbox plants: a setuid binary of its root, and a private file.
    const r = await sbx.commands.run(
      'sudo cp /usr/bin/id /tmp/suid-id && sudo chmod 4755 /tmp/suid-id && ' +
        'echo sandbox-secret | sudo tee /root/secret >/dev/null && sudo chmod 600 /root/secret && ls -ln /tmp/suid-id',
    );
    expect(r.stdout).toMatch(/^-rwsr-xr-x 1 0 0 /);
  });
  afterAll(async () => {
    if (server) expect(await endNode(server)).toEqual({ stray: [], exitCode: 0 });
  });

  it('a setuid binary planted inside is out of reach of a host user, and inert on the host path', () => {
    for (const path of [join(dir, 'upper/tmp/suid-id'), join(dir, 'rootfs/tmp/suid-id')]) {
      const r = asNobody('"$1" -u', path);
      expect(r.code, r.out).not.toBe(0);
      expect(r.out).toMatch(/Permission denied/);
    }
    // Given an open file all the same, the host-side copy (on the nosuid volume) runs as the user it was.
    expect(execAsNobodyViaFd(join(dir, 'upper/tmp/suid-id'))).toMatch(
      /^uid=65534\(nobody\) gid=65534\S* groups/,
    );
    expect(mountOptions(join(server.home, 'sandboxes'))).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
    // A running sandbox's root and sysfs are in its own mount namespace only (docs/runtime.md, "Mounts and
    // density"): on the host path there is no overlay to meet, only the dir.
    expect(mountOptions(join(dir, 'rootfs'))).toEqual(['']);
    expect(mountOptions(join(dir, 'sys'))).toEqual(['']);
  });

  it("a host user reads nothing of the node: state, secrets, sandbox files, other sandboxes' dirs", () => {
    for (const p of [
      join(server.home, 'state.db'),
      join(server.home, 'secrets/api-key'),
      join(dir, 'upper/root/secret'),
      join(dir, 'bundle/config.json'),
      join(server.home, 'test-config.toml'),
      join(server.runtimePath, 'server.pid'),
    ]) {
      const r = asNobody('cat "$1"', p);
      expect(r.code, `${p}: ${r.out}`).not.toBe(0);
    }
    for (const d of [server.home, join(server.home, 'sandboxes'), dir, server.runtimePath]) {
      const r = asNobody('ls "$1"', d);
      expect(r.code, `${d}: ${r.out}`).not.toBe(0);
    }
    // The one readable exception: the tools dir every sandbox mounts read-only (public code, no secret).
    const tools = readFileSync(join(dir, 'bundle/config.json'), 'utf8');
    const toolsDir = (JSON.parse(tools) as { mounts: { destination: string; source: string }[] }).mounts.find(
      (m) => m.destination === '/agentenv',
    )!.source;
    expect(asNobody('cat "$1"', join(toolsDir, 'VERSION')).code).toBe(0);
  });

  it('inside, setuid still works for sudo, new files get the usual modes, device nodes do not', async () => {
    expect((await sbx.commands.run('sudo id -u; umask')).stdout).toBe('0\n0022\n');
    await sbx.files.write('modes/uploaded.txt', 'x');
    expect((await sbx.commands.run('stat -c %a modes/uploaded.txt; touch t2; stat -c %a t2')).stdout).toBe(
      '644\n644\n',
    );
    const mknod = await sbx.commands.run('sudo mknod /tmp/mem c 1 1; echo rc=$?');
    expect(mknod.stdout).toMatch(/rc=1/);
    expect((await sbx.commands.run('awk \'$2 == "/" {print $4}\' /proc/self/mounts')).stdout).toMatch(
      /nodev/,
    );
    const sys = (await sbx.commands.run('awk \'$2 == "/sys" {print $4}\' /proc/self/mounts')).stdout;
    expect(sys.trim().split(',')).toEqual(expect.arrayContaining(['ro', 'nosuid', 'nodev', 'noexec']));
  });

  it('after a pause to disk, a resume and a snapshot, every node file is private (or a documented exception)', async () => {
    const sleeper = await sbx.commands.run('exec sleep 1000', { background: true });
    await sleeper.disconnect();
    expect(await sbx.betaPause()).toBe(true);
    const paused = (await server.api('GET', `/sandboxes/${sbx.sandboxId}`)).body;
    expect(paused).toMatchObject({ state: 'paused', pauseKind: 'memory' });
    expect(modeViolations(server)).toEqual([]);
    sbx = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 });
    // A memory restore (CRIU reads its images as the sandbox's root): the process runs on.
    expect((await sbx.commands.run(`cat /proc/${sleeper.pid}/cmdline | tr '\\0' ' '`)).stdout).toBe(
      'sleep 1000 ',
    );
    expect((await sbx.commands.run('sudo cat /root/secret')).stdout).toBe('sandbox-secret\n');
    const snap = await sbx.createSnapshot();
    expect(snap.snapshotId).toMatch(/^[0-9a-f-]{36}$/);
    expect(modeViolations(server)).toEqual([]);
    // A host user lists nothing below the node's dirs.
    const found = asNobody('find "$1" "$2" 2>/dev/null', server.home, server.runtimePath);
    expect(found.out.split('\n').filter(Boolean).sort()).toEqual([server.home, server.runtimePath].sort());
  });

  it('a restart over modes an older version left (world-readable state, suid volume) puts them right', async () => {
    await server.stop();
    for (const [p, m] of [
      [server.home, 0o755],
      [join(server.home, 'state.db'), 0o644],
      [join(server.home, 'secrets'), 0o755],
      [join(server.home, 'secrets/api-key'), 0o644],
      [join(server.home, 'sandboxes/.store'), 0o755],
      [server.runtimePath, 0o755],
    ] as const)
      chmodSync(p, m);
    writeFileSync(join(server.home, 'left-by-hand.txt'), 'x', { mode: 0o644 });
    chmodSync(join(server.home, 'left-by-hand.txt'), 0o644);
    spawnSync('mount', ['-o', 'remount,bind,suid,dev', join(server.home, 'sandboxes')]);
    expect(mountOptions(join(server.home, 'sandboxes'))).not.toContain('nosuid');
    expect(asNobody('cat "$1"', join(server.home, 'secrets/api-key')).code).toBe(0); // the hole being fixed
    server = await server.restart();
    useSdk(server);
    expect(modeViolations(server)).toEqual([]);
    expect(mountOptions(join(server.home, 'sandboxes'))).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
    expect(asNobody('cat "$1"', join(server.home, 'secrets/api-key')).code).not.toBe(0);
    expect(basename(server.home)).toBe('shost1');
  });
});
