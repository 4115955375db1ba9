// Hostile input: resource exhaustion inside a sandbox stays inside its cgroup limits, file paths cannot leave
// the sandbox's filesystem, and the sandbox sees no host devices, mounts, modules, processes or secrets.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { CommandExitError, NotEnoughSpaceError, Sandbox } from 'e2b';
import { eventually, type TestServer } from './harness.js';
import { describeNode } from './fixture.js';

const PIDS_LIMIT = 200;
const MEMORY_MB = 256;
const DISK_MB = 1024;
const tag = `${process.pid}-${Date.now()}`;
const sha256 = (b: string | Buffer) => createHash('sha256').update(b).digest('hex');

/** Runs `cmd`; a non-zero exit is returned, not thrown. */
async function attempt(sbx: Sandbox, cmd: string, user: 'user' | 'root' = 'user') {
  try {
    const r = await sbx.commands.run(cmd, { user });
    return { exitCode: 0, stdout: r.stdout, stderr: r.stderr, error: undefined as string | undefined };
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e;
    return { exitCode: e.exitCode, stdout: e.stdout, stderr: e.stderr, error: e.error };
  }
}

/** The sandbox's cgroup directory in a v1 controller (or the v2 unified tree). */
function cgroupFile(server: TestServer, sandboxId: string, controller: string, file: string): string {
  const v1 = join('/sys/fs/cgroup', controller, server.prefix, sandboxId, file);
  return existsSync(v1) ? v1 : join('/sys/fs/cgroup', server.prefix, sandboxId, file);
}

describe('hostile input inside a sandbox', () => {
  const { server } = describeNode({
    name: 'hostile',
    // No resident grace: a paused sandbox's memory goes to disk at once, and its resume restores it from there.
    toml: `[machine]\nmem_size_mib = ${MEMORY_MB}\nvcpu_count = 1\n[orchestrator]\nresident_pause_grace_secs = 0\n`,
    runtime: [`pids_limit = ${PIDS_LIMIT}`, `default_disk_size_mb = ${DISK_MB}`],
  });
  let sbx: Sandbox;

  beforeAll(async () => {
    sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { suite: 'hostile' } });
  });

  describe('resource limits', () => {
    it('stops a fork bomb at the pids limit and the sandbox keeps working', async () => {
      const bomb = await Sandbox.create({ timeoutMs: 120_000 });
      try {
        expect(Number(readFileSync(cgroupFile(server, bomb.sandboxId, 'pids', 'pids.max'), 'utf8'))).toBe(
          PIDS_LIMIT,
        );
        // A forker that counts how far it gets, then lets its children go.
        const forker = await attempt(
          bomb,
          `python3 -c '
import os, time, errno
kids = []
try:
    while len(kids) < 5000:
        pid = os.fork()
        if pid == 0:
            time.sleep(30); os._exit(0)
        kids.append(pid)
except OSError as e:
    print("stopped", errno.errorcode[e.errno], len(kids))
for k in kids: os.kill(k, 9)
for k in kids: os.waitpid(k, 0)
'`,
        );
        const [, code, count] = forker.stdout.trim().split(' ');
        expect(code).toBe('EAGAIN');
        expect(Number(count)).toBeLessThan(PIDS_LIMIT);

        // The real thing: every process forks forever. timeout(1) bounds it by SIGKILLing the whole process group
        // (python's children stay in it; bash would retry failed forks for a long time instead).
        const bombed = await attempt(
          bomb,
          `timeout -s KILL 5 python3 -c 'import os\nwhile True:\n    try: os.fork()\n    except OSError: pass'`,
        );
        expect(bombed.exitCode).not.toBe(0);
        const events = readFileSync(cgroupFile(server, bomb.sandboxId, 'pids', 'pids.events'), 'utf8');
        expect(Number(/max (\d+)/.exec(events)?.[1])).toBeGreaterThan(0);
        // Stragglers may still be dying; the sandbox answers again once they are gone.
        await eventually(
          async () => (await attempt(bomb, 'echo alive')).stdout === 'alive\n',
          'the sandbox to recover',
          60,
          500,
        );
        expect(await bomb.isRunning()).toBe(true);
        // Other sandboxes never noticed.
        expect((await sbx.commands.run('echo fine')).stdout).toBe('fine\n');
      } finally {
        await bomb.kill();
      }
    });

    it('OOM-kills a process past memoryMB without touching another sandbox', async () => {
      const hog = await Sandbox.create({ timeoutMs: 120_000 });
      try {
        const info = await hog.getInfo();
        expect(info.memoryMB).toBe(MEMORY_MB);
        expect(
          Number(readFileSync(cgroupFile(server, hog.sandboxId, 'memory', 'memory.limit_in_bytes'), 'utf8')),
        ).toBe(MEMORY_MB * 1024 * 1024);
        // The neighbour holds 100 MB across the whole episode and must finish normally.
        const neighbour = sbx.commands.run(
          `python3 -c 'import time; x = b"y" * (100 * 1024 * 1024); time.sleep(4); print(len(x))'`,
        );
        const hogged = await attempt(
          hog,
          `python3 -c 'x = b"x" * (${MEMORY_MB * 3} * 1024 * 1024); print("survived")'`,
        );
        expect(hogged.stdout).not.toContain('survived');
        expect(hogged.exitCode).not.toBe(0);
        expect(hogged.error ?? '').toMatch(/killed|137/);
        expect((await neighbour).stdout).toBe(`${100 * 1024 * 1024}\n`);
        // envd and the sandbox outlived the OOM kill.
        expect((await hog.commands.run('echo alive')).stdout).toBe('alive\n');
        const oom = readFileSync(cgroupFile(server, hog.sandboxId, 'memory', 'memory.oom_control'), 'utf8');
        expect(Number(/oom_kill (\d+)/.exec(oom)?.[1])).toBeGreaterThan(0);
      } finally {
        await hog.kill();
      }
    });
  });

  describe('disk', () => {
    it('stops a sandbox filling its disk at diskSizeMB without touching another sandbox', async () => {
      const filler = await Sandbox.create({ timeoutMs: 120_000 });
      try {
        expect((await server.api('GET', `/sandboxes/${filler.sandboxId}`)).body.diskSizeMB).toBe(DISK_MB);
        const filled = await attempt(filler, `head -c ${DISK_MB + 200}M /dev/zero > fill; echo rc=$?`);
        expect(filled.stderr).toMatch(/quota/i);
        expect(filled.stdout).toBe('rc=1\n');
        // Full: an upload is refused as the SDK expects (507), and the neighbour still writes.
        await expect(filler.files.write('more.bin', 'x'.repeat(8 << 20))).rejects.toBeInstanceOf(
          NotEnoughSpaceError,
        );
        expect((await sbx.commands.run('head -c 50M /dev/zero > n.bin && wc -c < n.bin')).stdout).toBe(
          `${50 << 20}\n`,
        );
        // A full sandbox still pauses and resumes from its disk (restarted or with its memory), as full as it
        // was; envd, whose log is on that disk, keeps answering.
        for (const body of [{ keepMemory: false }, {}]) {
          const id = filler.sandboxId;
          expect((await server.api('POST', `/sandboxes/${id}/pause`, body)).status).toBe(204);
          expect((await server.api('POST', `/sandboxes/${id}/connect`, { timeout: 120 })).status).toBe(201);
          expect((await filler.commands.run('echo alive')).stdout).toBe('alive\n');
        }
        expect((await attempt(filler, 'echo x > more.txt')).stderr).toMatch(/quota/i);
        // Freed space can be used again; the sandbox itself never stopped working.
        expect(
          (await filler.commands.run('rm fill && sync && head -c 8M /dev/zero > ok && echo ok')).stdout,
        ).toBe('ok\n');
      } finally {
        await filler.kill();
      }
    });
  });

  describe('file paths', () => {
    it('keeps .. paths inside the sandbox', async () => {
      const name = `aenv-e2e-escape-${tag}`;
      const w = await sbx.files.write(`../../../../../../../../tmp/${name}`, 'dots', { user: 'root' });
      expect(w.path).toBe(`/tmp/${name}`);
      expect((await sbx.commands.run(`cat /tmp/${name}`)).stdout).toBe('dots');
      const multi = await sbx.files.write([{ path: `/home/user/../../../../etc/${name}`, data: 'multi' }], {
        user: 'root',
      });
      expect(multi[0]!.path).toBe(`/etc/${name}`);
      expect(existsSync(`/tmp/${name}`)).toBe(false);
      expect(existsSync(`/etc/${name}`)).toBe(false);
      // The relative form resolves against home, then climbs inside the sandbox only.
      expect(await sbx.files.read(`../../etc/${name}`)).toBe('multi');
    });

    it('follows symlinks inside the sandbox, never to the host', async () => {
      const hostShadow = readFileSync('/etc/shadow');
      const hostShadowMtime = statSync('/etc/shadow').mtimeMs;
      const name = `aenv-e2e-link-${tag}`;
      await sbx.commands.run(
        `ln -sfn / ~/rootlink && ln -sfn /etc/shadow ~/shadowlink && ln -sfn /etc/${name} ~/newlink`,
      );

      const via = await sbx.files.write(`/home/user/rootlink/tmp/${name}`, 'through a link', {
        user: 'root',
      });
      expect(via.path).toMatch(new RegExp(`/tmp/${name}$`));
      expect((await sbx.commands.run(`cat /tmp/${name}`)).stdout).toBe('through a link');
      expect(existsSync(`/tmp/${name}`)).toBe(false);

      const inSandbox = (await sbx.commands.run('sha256sum /etc/shadow', { user: 'root' })).stdout.split(
        ' ',
      )[0];
      const read = await sbx.files.read('/home/user/shadowlink', { user: 'root', format: 'bytes' });
      expect(sha256(Buffer.from(read))).toBe(inSandbox);
      expect(sha256(Buffer.from(read))).not.toBe(sha256(hostShadow));
      // As user, the sandbox's own shadow file is off limits too.
      await expect(sbx.files.read('/home/user/shadowlink')).rejects.toThrow();

      await sbx.files.write('/home/user/newlink', 'created through a dangling link', { user: 'root' });
      expect(existsSync(`/etc/${name}`)).toBe(false);
      await sbx.files.write('/home/user/shadowlink', 'root::0:0:99999:7:::\n', { user: 'root' });
      expect(sha256(readFileSync('/etc/shadow'))).toBe(sha256(hostShadow));
      expect(statSync('/etc/shadow').mtimeMs).toBe(hostShadowMtime);
      // As user, an upload is E2B's: written by root and handed to the user, in the sandbox's /etc only.
      await sbx.files.write(`/etc/${name}.user`, 'by user');
      expect(await sbx.files.getInfo(`/etc/${name}.user`)).toMatchObject({ owner: 'user' });
      expect(existsSync(`/etc/${name}.user`)).toBe(false);
    });
  });

  describe('host isolation', () => {
    it('shows no host devices and refuses mknod', async () => {
      const devs = (await sbx.commands.run('ls -A /dev')).stdout.split('\n').filter(Boolean);
      const allowed = new Set([
        'console',
        'core',
        'fd',
        'full',
        'mqueue',
        'null',
        'ptmx',
        'pts',
        'random',
        'shm',
        'stderr',
        'stdin',
        'stdout',
        'tty',
        'urandom',
        'zero',
      ]);
      expect(devs.filter((d) => !allowed.has(d))).toEqual([]);
      expect((await attempt(sbx, 'mknod /tmp/disk b 8 0', 'root')).exitCode).not.toBe(0);
      expect((await attempt(sbx, 'head -c1 /dev/kmsg', 'root')).exitCode).not.toBe(0);
    });

    it('cannot mount, load kernel modules or write kernel settings, even as root', async () => {
      const mount = await attempt(sbx, 'mount -t tmpfs none /mnt', 'root');
      expect(mount.exitCode).not.toBe(0);
      expect(mount.stderr).toMatch(/permission denied|not permitted/i);
      // init_module and finit_module, straight through the syscall interface (x86_64 numbers).
      const modules = await attempt(
        sbx,
        `python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for nr, args in ((175, (None, 0, b"")), (313, (0, b"", 0))):
    r = libc.syscall(nr, *args)
    print(r, os.strerror(ctypes.get_errno()))
'`,
        'root',
      );
      expect(modules.stdout).toBe('-1 Operation not permitted\n-1 Operation not permitted\n');
      const sysctl = await attempt(sbx, 'echo 1 > /proc/sys/kernel/sysrq', 'root');
      expect(sysctl.exitCode).not.toBe(0);
      expect((await attempt(sbx, 'echo b > /proc/sysrq-trigger', 'root')).exitCode).not.toBe(0);
    });

    it('sees only its own processes', async () => {
      const ps = (await sbx.commands.run('ps -eo pid=,args=', { user: 'root' })).stdout.trim().split('\n');
      const pid1 = ps.find((l) => l.trim().startsWith('1 '));
      expect(pid1).toMatch(/agentenv|envd/);
      expect(ps.length).toBeLessThan(20);
      const all = ps.join('\n');
      for (const hostOnly of ['vitest', 'main.js server', 'runc', 'systemd', 'sshd'])
        expect(all).not.toContain(hostOnly);
      // The server process is not there under its host pid either.
      const serverPid = /"pid":(\d+)/.exec(server.logs())?.[1];
      if (serverPid) expect((await attempt(sbx, `kill -0 ${serverPid}`, 'root')).exitCode).not.toBe(0);
    });

    it('keeps the envd access token out of environments and out of the reach of user', async () => {
      // Decision: the token guards the sandbox from callers outside it. Code inside has passwordless sudo and can
      // already do whatever envd does, so root inside the sandbox is not kept from it (envd keeps its state,
      // token included, in a root-only file so that it can be restarted). What we require: the token is in no
      // process environment and nothing `user` can read without sudo contains it.
      const created = await server.api('POST', '/sandboxes', {
        templateID: 'base',
        secure: true,
        timeout: 120,
      });
      const token: string = created.body.envdAccessToken;
      const secure = await Sandbox.connect(created.body.sandboxID);
      try {
        expect((await secure.commands.run('env')).stdout).not.toContain(token);
        expect((await secure.commands.run('env', { user: 'root' })).stdout).not.toContain(token);
        const environ = await attempt(secure, 'cat /proc/1/environ');
        expect(environ.exitCode).not.toBe(0);
        expect(environ.stdout).not.toContain(token);
        expect((await attempt(secure, 'cat /proc/1/cmdline')).stdout).not.toContain(token);
        const readable = await attempt(
          secure,
          `grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev ${token} / 2>/dev/null`,
        );
        expect(readable.stdout).toBe('');
        const holders = (
          await attempt(
            secure,
            `grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev ${token} / 2>/dev/null`,
            'root',
          )
        ).stdout
          .split('\n')
          .filter(Boolean);
        for (const file of holders) {
          expect(
            (await secure.commands.run(`stat -c '%U %a' ${file}`, { user: 'root' })).stdout,
            file,
          ).toMatch(/^root [46]00\n$/);
        }
      } finally {
        await secure.kill();
      }
    });
  });
});
