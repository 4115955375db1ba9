// Cold starts (`POST /sandboxes-cold`, docs/api.md): a sandbox booted straight from an OCI image of the loopback
// registry with its own resources, no template build first — over raw HTTP and through `aenv start --cold`, used
// with the e2b SDK; and the hostile requests that must create nothing.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import { REPO, type TestServer } from './harness.js';
import { describeNode } from './fixture.js';

const CLI = join(REPO, 'packages', 'cli', 'dist', 'main.js');
const REGISTRY = process.env.AENV_TEST_REGISTRY ?? '127.0.0.1:5000';
const BUSYBOX = `${REGISTRY}/aenv/busybox:latest`;
const BASE = `${REGISTRY}/aenv/base:latest`;

/**
 * The sandbox's memory and CPU limits as its cgroup files on the host say (v1 controllers, else the v2 unified
 * tree): a sandbox has its own cgroup namespace and no cgroup mount, so a command inside cannot read them.
 */
function cgroupLimits(server: TestServer, id: string): { memoryBytes: number; cpu: string } {
  const read = (...parts: string[]) => readFileSync(join('/sys/fs/cgroup', ...parts), 'utf8').trim();
  if (existsSync(join('/sys/fs/cgroup', 'memory', server.prefix, id))) {
    return {
      memoryBytes: Number(read('memory', server.prefix, id, 'memory.limit_in_bytes')),
      cpu: `${read('cpu', server.prefix, id, 'cpu.cfs_quota_us')} ${read('cpu', server.prefix, id, 'cpu.cfs_period_us')}`,
    };
  }
  return {
    memoryBytes: Number(read(server.prefix, id, 'memory.max')),
    cpu: read(server.prefix, id, 'cpu.max'),
  };
}

describe('cold start from an image', () => {
  const { server } = describeNode({
    name: 'cold',
    // Only the loopback registry may be pulled from: no test reference can reach out anywhere else.
    toml: [
      '[image.resolver]',
      `insecure_registries = ["${REGISTRY}"]`,
      `allowed_registries = ["${REGISTRY}"]`,
      `search_registries = ["${REGISTRY}"]`,
      '[limits]',
      'max_cpu_count = 4',
      'max_memory_mb = 4096',
      '',
    ].join('\n'),
  });
  let home: string;

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'aenv-cold-home-'));
  });
  afterAll(async () => {
    if (home) rmSync(home, { recursive: true, force: true });
  });

  const count = async () => ((await server.api('GET', '/v2/sandboxes')).body as unknown[]).length;

  it('boots busybox over raw HTTP with the requested resources, usable through the SDK', async () => {
    const r = await server.api('POST', '/sandboxes-cold', {
      image: BUSYBOX,
      cpuCount: 1,
      memoryMB: 256,
      diskSizeMB: 2048,
      timeout: 120,
      metadata: { suite: 'cold' },
      envVars: { COLD: 'yes' },
      allowInternetAccess: false,
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    const id = r.body.sandboxID as string;
    expect(r.headers.get('x-agentenv-sandbox-id')).toBe(id);
    expect(r.body).toMatchObject({ templateID: expect.stringContaining('aenv/busybox'), clientID: '' });
    const detail = await server.api('GET', `/sandboxes/${id}`);
    expect(detail.body).toMatchObject({
      cpuCount: 1,
      memoryMB: 256,
      diskSizeMB: 2048,
      state: 'running',
      metadata: { suite: 'cold' },
      allowInternetAccess: false,
    });

    const sbx = await Sandbox.connect(id);
    // The SDK runs commands with /bin/bash (E2B's convention), which busybox lacks: its files API shows the image.
    expect((await sbx.files.list('/bin')).map((e) => e.name)).toContain('busybox');
    expect(await sbx.files.exists('/usr/bin/python3')).toBe(false);
    expect(cgroupLimits(server, id)).toEqual({ memoryBytes: 256 * 1024 * 1024, cpu: '100000 100000' });
    // No template stands behind it: pause and resume work from the sandbox's own record and image.
    await sbx.files.write('/tmp/mark', 'kept');
    await sbx.pause();
    expect((await server.api('GET', `/sandboxes/${id}`)).body.state).toBe('paused');
    const back = await Sandbox.connect(id);
    expect(await back.files.read('/tmp/mark')).toBe('kept');
    expect((await server.api('GET', `/sandboxes/${id}`)).body).toMatchObject({ cpuCount: 1, memoryMB: 256 });
    await back.kill();

    // No diskSizeMB: the image's size (as the reference), busybox's few MiB rounded up to the 1024 MiB step.
    const small = await server.api('POST', '/sandboxes-cold', { image: BUSYBOX, timeout: 60 });
    expect(small.status, JSON.stringify(small.body)).toBe(201);
    expect((await server.api('GET', `/sandboxes/${small.body.sandboxID}`)).body.diskSizeMB).toBe(1024);
    expect((await server.api('DELETE', `/sandboxes/${small.body.sandboxID}`)).status).toBe(204);
  });

  it('boots aenv/base with `aenv start --cold` and the [machine] defaults where the request says nothing', async () => {
    const ran = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve, reject) => {
      const child = spawn(
        process.execPath,
        [CLI, 'start', '--cold', '-d', '--cpu', '2', '--timeout', '120', '--env', 'COLD=yes', BASE],
        {
          env: {
            PATH: process.env.PATH ?? '/usr/bin:/bin',
            HOME: home,
            AENV_URL: server.url,
            AENV_API_KEY: server.apiKey,
          },
          stdio: ['ignore', 'pipe', 'pipe'],
          timeout: 240_000,
        },
      );
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    });
    expect(ran.code, ran.stderr).toBe(0);
    const id = ran.stdout.trim();
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    const detail = await server.api('GET', `/sandboxes/${id}`);
    // [machine] defaults of the test config: mem_size_mib 1024; the disk is the image's size (a whole number of
    // GiB, well below [runtime].default_disk_size_mb = 20480, which is for template sandboxes).
    expect(detail.body).toMatchObject({ cpuCount: 2, memoryMB: 1024 });
    expect(detail.body.diskSizeMB % 1024).toBe(0);
    expect(detail.body.diskSizeMB).toBeGreaterThanOrEqual(1024);
    expect(detail.body.diskSizeMB).toBeLessThan(20480);
    expect(detail.body.templateID).toContain('aenv/base');

    const sbx = await Sandbox.connect(id);
    const run = await sbx.commands.run(
      `echo "$COLD"; python3 -c 'print(6*7)'; test -e /bin/busybox || echo no-busybox`,
    );
    expect(run.stdout).toBe('yes\n42\nno-busybox\n');
    expect(cgroupLimits(server, id)).toEqual({ memoryBytes: 1024 * 1024 * 1024, cpu: '200000 100000' });
    await sbx.kill();
  });

  it('answers hostile requests with a 4xx JSON error and creates nothing', async () => {
    const before = await count();
    const cases: [unknown, number, RegExp][] = [
      [undefined, 400, /a JSON body is required/],
      [{}, 400, /image/],
      [{ image: '' }, 400, /image must not be empty/],
      [{ image: 'x'.repeat(100_000) }, 400, /image/],
      [{ image: ['a'] }, 400, /image/],
      [{ image: 'UPPER/Case::bad' }, 400, /resolve sandbox rootfs image/],
      [{ image: 'oci:/etc' }, 400, /local_image_dirs/],
      [{ image: 'oci:/var/cache/aenv/images/../../../etc:latest' }, 400, /resolve sandbox rootfs image/],
      [{ image: 'docker.io/library/ubuntu:22.04' }, 400, /not allowed/],
      [{ image: `${REGISTRY}/aenv/no-such-image:latest` }, 400, /resolve sandbox rootfs image/],
      [{ image: BUSYBOX, cpuCount: 0 }, 400, /^cpuCount must be greater than 0$/],
      [{ image: BUSYBOX, cpuCount: 64 }, 400, /limits\.max_cpu_count/],
      [{ image: BUSYBOX, cpuCount: '1' }, 400, /cpuCount/],
      [{ image: BUSYBOX, memoryMB: 64 }, 400, /^memoryMB must be at least 128$/],
      [{ image: BUSYBOX, memoryMB: 1e12 }, 400, /memoryMB/],
      [{ image: BUSYBOX, diskSizeMB: 1000 }, 400, /^diskSizeMB must be at least 1024 and divisible by 1024$/],
      [{ image: BUSYBOX, diskSizeMB: 1 << 30 }, 400, /max_disk_size_mb/],
      [{ image: BUSYBOX, metadata: { a: 'x'.repeat(20_000) } }, 400, /max_metadata_bytes/],
      [{ image: BUSYBOX, envVars: { A: 7 } }, 400, /envVars\.A/],
      [{ image: BUSYBOX, timeout: 'soon' }, 400, /timeout/],
      [
        { image: BUSYBOX, attachedDrives: [{ driveID: 'rootfs', source: { image: BUSYBOX } }] },
        400,
        /^attachedDrives\[0\] \(driveID "rootfs"\): driveID rootfs is reserved$/,
      ],
      [
        {
          image: BUSYBOX,
          attachedDrives: [{ driveID: 'd', source: { image: 'docker.io/library/ubuntu:22.04' } }],
        },
        400,
        /^resolve attached drive d image .*not allowed/,
      ],
      [
        {
          image: BUSYBOX,
          attachedDrives: [
            { driveID: 'w', readOnly: false, diskSizeMB: 1 << 30, source: { image: BUSYBOX } },
          ],
        },
        400,
        /with its writable attached drives.*max_disk_size_mb/,
      ],
      [{ image: BUSYBOX, extraBootArgs: 'init=/bin/sh' }, 400, /^extraBootArgs is not supported/],
      [{ image: BUSYBOX, customExtensionParams: { a: 1 } }, 400, /no custom extension is configured/],
      [{ image: BUSYBOX, network: { allowOut: ['not a cidr'] } }, 400, /./],
    ];
    // One at a time: together they would also meet limits.max_concurrent_creates (429).
    const answers = [];
    for (const [body] of cases) answers.push(await server.api('POST', '/sandboxes-cold', body));
    answers.forEach((a, i) => {
      const [body, status, message] = cases[i]!;
      const shown = JSON.stringify(body)?.slice(0, 120);
      expect(a.status, `${shown} → ${JSON.stringify(a.body)}`).toBe(status);
      expect(a.body.code, shown).toBe(status);
      expect(a.body.message, shown).toMatch(message);
    });
    const notJson = await fetch(`${server.url}/sandboxes-cold`, {
      method: 'POST',
      headers: { 'x-api-key': server.apiKey, 'content-type': 'application/json' },
      body: '{"image":',
    });
    expect(notJson.status).toBe(400);
    const unauth = await fetch(`${server.url}/sandboxes-cold`, { method: 'POST', body: '{}' });
    expect(unauth.status).toBe(401);
    expect(await count()).toBe(before);
    expect((await server.api('GET', '/health')).status).toBe(204);
  });
});
