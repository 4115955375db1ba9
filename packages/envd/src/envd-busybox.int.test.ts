// envd in a busybox-only rootfs (no libc, no bash: /bin/bash is a wrapper around busybox sh), as PID 1's
// child under aenv-init: it must work with nothing but the tools dir, and survive its own crash.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthenticationError } from 'e2b';
import { ENVD_NODE_FLAGS } from '@aenv/node';
import { buildTestRootfs } from './testing/rootfs.js';
import { buildTestTools } from './testing/tools.js';
import { startSandboxEnvd, type RunningTestEnvd } from './testing/envd-process.js';
import { initEnvd, sdkSandbox } from './testing/sdk.js';

const TOKEN = 'busybox-token';
let deps: string;
let rootfs: string;
let envd: RunningTestEnvd;

beforeAll(async () => {
  deps = mkdtempSync('/tmp/aenv-envd-bb-deps-');
  rootfs = mkdtempSync('/tmp/aenv-envd-bb-rootfs-');
  const tools = await buildTestTools(deps);
  buildTestRootfs(rootfs, { hostBash: false });
  envd = await startSandboxEnvd(rootfs, tools.dir);
  expect(
    (await initEnvd(envd.url, { defaultUser: 'user', accessToken: TOKEN, envVars: { KEPT: 'yes' } })).status,
  ).toBe(204);
});

afterAll(async () => {
  await envd?.stop();
  if (rootfs) rmSync(rootfs, { recursive: true, force: true });
  if (deps) rmSync(deps, { recursive: true, force: true });
});

function envdPid(): number | undefined {
  const kids = readFileSync(`/proc/${envd.pid}/task/${envd.pid}/children`, 'utf8').trim();
  return kids ? Number(kids.split(/\s+/)[0]) : undefined;
}

describe('envd in a busybox-only rootfs', () => {
  it('has no libc of its own: everything comes from /agentenv', () => {
    expect(existsSync(join(rootfs, 'lib'))).toBe(false);
    expect(existsSync(join(rootfs, 'lib64'))).toBe(false);
  });

  it('runs commands, PTYs and file operations through the SDK', async () => {
    const sbx = sdkSandbox(envd.url, TOKEN);
    const r = await sbx.commands.run('echo "$KEPT $(id -u) $(id -G)"; cat /etc/hostname');
    const [first, hostname] = r.stdout.split('\n');
    const [kept, uid, ...groups] = first!.split(' ');
    expect([kept, uid, hostname]).toEqual(['yes', '1000', 'sandbox']);
    expect(groups.map(Number).sort((a, b) => a - b)).toEqual([27, 1000, 2000]);
    await sbx.files.write('hello.txt', 'from busybox');
    expect(await sbx.files.read('hello.txt')).toBe('from busybox');
    expect((await sbx.files.getInfo('hello.txt')).owner).toBe('user');

    let out = '';
    const term = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (d) => void (out += new TextDecoder().decode(d)),
      timeoutMs: 0,
    });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo pty-$((6*7))\n'));
    for (let i = 0; i < 100 && !out.includes('pty-42'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(out).toContain('pty-42');
    await sbx.pty.kill(term.pid);
  });

  it('streams megabytes of output intact (base64 in JSON, encoded natively)', async () => {
    const sbx = sdkSandbox(envd.url, TOKEN);
    let chunks = 0;
    const r = await sbx.commands.run('seq 1 400000; seq 7 9 >&2', { onStdout: () => void chunks++ });
    const expected = `${Array.from({ length: 400000 }, (_, i) => i + 1).join('\n')}\n`;
    expect(r.stdout.length).toBe(expected.length);
    expect(r.stdout === expected).toBe(true);
    expect(r.stderr).toBe('7\n8\n9\n');
    expect(chunks).toBeGreaterThan(1);
  });

  it('runs under the flags of ENVD_NODE_FLAGS, lite mode included', () => {
    const cmdline = readFileSync(`/proc/${envdPid()!}/cmdline`, 'utf8').split('\0');
    expect(cmdline).toEqual(expect.arrayContaining([...ENVD_NODE_FLAGS]));
    expect(cmdline).toContain('--lite-mode');
  });

  it('is restarted by aenv-init after a crash and keeps its token and env', async () => {
    const before = envdPid();
    expect(before).toBeDefined();
    process.kill(before!, 'SIGKILL');
    let after: number | undefined;
    for (let i = 0; i < 200; i++) {
      after = envdPid();
      if (after && after !== before) {
        const ok = await fetch(`${envd.url}/health`).then(
          (r) => r.status === 204,
          () => false,
        );
        if (ok) break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(after).toBeDefined();
    expect(after).not.toBe(before);
    await expect(sdkSandbox(envd.url).commands.run('true')).rejects.toThrow(AuthenticationError);
    expect((await sdkSandbox(envd.url, TOKEN).commands.run('echo $KEPT')).stdout).toBe('yes\n');
  });

  it('reports its idle memory', async () => {
    await new Promise((r) => setTimeout(r, 1000));
    const pid = envdPid()!;
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const pss = Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))?.[1]) / 1024;
    const kb = (re: RegExp) => Number(re.exec(status)?.[1]) / 1024;
    const rss = kb(/VmRSS:\s+(\d+)/);
    console.info(
      `envd idle: RSS ${rss.toFixed(1)} MB, anon ${kb(/RssAnon:\s+(\d+)/).toFixed(1)} MB, PSS ${pss.toFixed(1)} MB`,
    );
    expect(rss).toBeGreaterThan(0);
    expect(kb(/RssAnon:\s+(\d+)/)).toBeLessThan(64); // far above the measured ~15 MB: only catches leaks at startup
  });
});
