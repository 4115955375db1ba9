import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import Fastify from 'fastify';
import { loadConfig } from '@aenv/config';
import { createHttpServer } from '../front-door/http-server.js';
import {
  AdmissionControl,
  admissionLimitsFrom,
  registerAdmission,
  type AdmissionLimits,
} from './admission.js';
import { ServerMetrics } from '../observability/metrics.js';
import { createLogger } from '../util/log.js';

const KEY = 'e2b_' + 'ab'.repeat(32);
const silent = new Writable({ write: (_c, _e, cb) => cb() });

const LIMITS: AdmissionLimits = {
  maxCpuCount: 4,
  maxMemoryMB: 4096,
  maxDiskSizeMB: 20480,
  maxMetadataEntries: 3,
  maxMetadataBytes: 64,
  maxEnvVars: 3,
  maxEnvVarBytes: 32,
  maxEnvVarsBytes: 64,
  maxBuildSteps: 2,
  maxForkCount: 2,
  maxConcurrentCreates: 2,
};

describe('admission limits in front of the routes', () => {
  const { app, server } = createHttpServer({
    apiKey: KEY,
    bodyLimitBytes: 1 << 20,
    logger: createLogger('json', 'info', silent),
    metrics: new ServerMetrics(),
  });
  const control = new AdmissionControl(LIMITS);
  let url = '';
  let handled = 0;
  let hold: Promise<void> = Promise.resolve();

  beforeAll(async () => {
    registerAdmission(app, control);
    const ok = async () => {
      handled++;
      await hold;
      return { ok: true };
    };
    app.post('/sandboxes', ok);
    app.post('/v2/sandboxes', ok);
    app.post('/sandboxes-cold', ok);
    app.post('/sandboxes/:id/fork', ok);
    app.post('/v3/templates', ok);
    app.post('/v2/templates/:templateID/builds/:buildID', ok);
    await app.listen({ host: '127.0.0.1', port: 0 });
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await app.close();
  });

  const post = async (path: string, body: unknown) => {
    const r = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'x-api-key': KEY, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return {
      status: r.status,
      body: (await r.json()) as { code: number; message: string },
      headers: r.headers,
    };
  };

  it.each([
    ['/v2/sandboxes', { metadata: { a: '1', b: '2', c: '3', d: '4' } }, /limits\.max_metadata_entries/],
    ['/sandboxes', { metadata: { a: 'x'.repeat(100) } }, /limits\.max_metadata_bytes/],
    ['/v2/sandboxes', { envVars: { A: '1', B: '2', C: '3', D: '4' } }, /limits\.max_env_vars\)/],
    ['/v2/sandboxes', { envVars: { A: 'x'.repeat(40) } }, /limits\.max_env_var_bytes/],
    [
      '/v2/sandboxes',
      { envVars: { A: 'x'.repeat(25), B: 'x'.repeat(25), C: 'x'.repeat(25) } },
      /max_env_vars_bytes/,
    ],
    ['/v2/sandboxes', { envVars: { 'A=B': '1' } }, /invalid variable name/],
    ['/v2/sandboxes', { envVars: { '': '1' } }, /invalid variable name/],
    ['/v2/sandboxes', { envVars: { A: 'a\0b' } }, /NUL/],
    ['/sandboxes/x/fork', { count: 3 }, /limits\.max_fork_count/],
    ['/sandboxes-cold', { image: 'i', cpuCount: 5 }, /cold sandbox request: cpuCount 5 .*max_cpu_count/],
    ['/sandboxes-cold', { image: 'i', memoryMB: 8192 }, /memoryMB 8192 .*limits\.max_memory_mb/],
    ['/sandboxes-cold', { image: 'i', diskSizeMB: 21504 }, /diskSizeMB 21504 .*max_disk_size_mb/],
    ['/sandboxes-cold', { image: 'i', metadata: { a: '1', b: '2', c: '3', d: '4' } }, /max_metadata_entries/],
    ['/sandboxes-cold', { image: 'i', envVars: { A: 'x'.repeat(40) } }, /limits\.max_env_var_bytes/],
    ['/v3/templates', { name: 't', cpuCount: 5 }, /cpuCount 5 .*limits\.max_cpu_count/],
    ['/v3/templates', { name: 't', memoryMB: 8192 }, /memoryMB 8192 .*limits\.max_memory_mb/],
    ['/v2/templates/a/builds/a', { steps: [{}, {}, {}] }, /limits\.max_build_steps/],
    [
      '/v2/templates/a/builds/a',
      { steps: [{ type: 'env', args: ['BIG', 'x'.repeat(40)] }] },
      /steps\[0\] \(ENV\): BIG .*limits\.max_env_var_bytes/,
    ],
  ])('%s %j is refused with a 400 naming the key', async (path, body, message) => {
    const before = handled;
    const r = await post(path, body);
    expect(r.status).toBe(400);
    expect(r.body.code).toBe(400);
    expect(r.body.message).toMatch(message);
    expect(handled).toBe(before);
  });

  it('lets requests within the limits and with wrong types through to the route', async () => {
    const before = handled;
    expect((await post('/v2/sandboxes', { metadata: { a: '1' }, envVars: { A: 'x' } })).status).toBe(200);
    expect((await post('/v2/sandboxes', { metadata: 'not a map', envVars: [1, 2] })).status).toBe(200);
    expect((await post('/sandboxes/x/fork', { count: 2 })).status).toBe(200);
    expect((await post('/v3/templates', { cpuCount: 4, memoryMB: 4096 })).status).toBe(200);
    expect(handled).toBe(before + 4);
  });

  it('answers 429 with Retry-After while max_concurrent_creates are in progress, and frees the slots after', async () => {
    let open!: () => void;
    hold = new Promise((r) => (open = r));
    const before = handled;
    const first = post('/v2/sandboxes', {});
    const second = post('/sandboxes', {});
    while (handled < before + 2) await new Promise((r) => setTimeout(r, 5));
    const third = await post('/v2/sandboxes', {});
    expect(third.status).toBe(429);
    expect(third.body.code).toBe(429);
    expect(third.body.message).toMatch(/limits\.max_concurrent_creates/);
    expect(third.headers.get('retry-after')).toBe('1');
    // A fork of 2 needs two slots too.
    expect((await post('/sandboxes/x/fork', { count: 2 })).status).toBe(429);
    open();
    hold = Promise.resolve();
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
    expect((await post('/sandboxes/x/fork', { count: 2 })).status).toBe(200);
  });

  it('refuses to start when a guarded route is missing', async () => {
    const bare = Fastify();
    registerAdmission(bare, control);
    bare.post('/sandboxes', async () => ({}));
    await expect(bare.ready()).rejects.toThrow(/routes not registered: POST \/v2\/sandboxes/);
  });
});

describe('[limits] from the config', () => {
  it('resolves 0 to the host, but never below the [machine] defaults', () => {
    const { config } = loadConfig({ configPath: undefined, env: {}, flags: {} });
    const small = admissionLimitsFrom(config, { cpus: 1, memoryMB: 512 });
    expect(small.maxCpuCount).toBe(config.machine.vcpu_count);
    expect(small.maxMemoryMB).toBe(config.machine.mem_size_mib);
    const big = admissionLimitsFrom(config, { cpus: 64, memoryMB: 262144 });
    expect(big).toMatchObject({
      maxCpuCount: 64,
      maxMemoryMB: 262144,
      maxDiskSizeMB: 65536,
      maxForkCount: 16,
    });
  });
});
