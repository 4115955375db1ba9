// Class "one caller must not take more than the node allows" (docs/security.md, "Admission limits"): resources
// above the node's maxima (asked for, or carried by the template a sandbox starts from), oversized metadata and
// envVars, too many build steps or fork children, too many creates at once: each gets a clear 4xx naming its
// `[limits]` key, and nothing is stored.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import { startServer, useSdk, type TestServer } from '../e2e/harness.js';
import { storedState } from './lib.js';

const LIMITS = [
  '[limits]',
  'max_cpu_count = 2',
  'max_memory_mb = 2048',
  'max_metadata_entries = 4',
  'max_env_var_bytes = 1024',
  'max_build_steps = 3',
  'max_fork_count = 2',
  'max_concurrent_creates = 2',
];

describe('admission limits on a real node', () => {
  let server: TestServer;
  let sbx: Sandbox;
  // Names of this run only: a node's home outlives a test run.
  const run = Date.now().toString(36);
  const snapName = `sreq4-snap-${run}`;

  beforeAll(async () => {
    server = await startServer({ name: 'sreq4', toml: LIMITS.join('\n') });
    useSdk(server);
    sbx = await Sandbox.create({ timeoutMs: 300_000, envs: { NEAR_LIMIT: 'y'.repeat(1000) } });
  });
  afterAll(async () => {
    if (server) expect(await server.shutdown()).toBe(0);
  });

  it('refuses template builds above max_cpu_count and max_memory_mb, storing nothing', async () => {
    const before = await storedState(server);
    const cpu = await server.api('POST', '/v3/templates', { name: `sreq4-cpu-${run}`, cpuCount: 3 });
    expect(cpu.status).toBe(400);
    expect(cpu.body).toEqual({
      code: 400,
      message: "template build request: cpuCount 3 is above this node's limit of 2 (limits.max_cpu_count)",
    });
    const mem = await server.api('POST', '/v3/templates', { name: `sreq4-mem-${run}`, memoryMB: 1_000_000 });
    expect(mem.status).toBe(400);
    expect(mem.body.message).toMatch(/memoryMB 1000000 .*limits\.max_memory_mb/);
    expect(await storedState(server)).toEqual(before);
    // At the limit is fine.
    const ok = await server.api('POST', '/v3/templates', {
      name: `sreq4-ok-${run}`,
      cpuCount: 2,
      memoryMB: 2048,
    });
    expect(ok.status).toBe(202);
    expect((await server.api('DELETE', `/templates/${ok.body.templateID}`)).status).toBe(204);
  });

  it('refuses envVars and metadata that every command of the sandbox would choke on', async () => {
    // Within the limits, commands run with the variable (a 200 KB one would make every exec fail: E2BIG).
    const near = await sbx.commands.run('printf %s "$NEAR_LIMIT" | wc -c');
    expect(near.stdout.trim()).toBe('1000');
    const before = await storedState(server);
    await expect(Sandbox.create({ envs: { BIG: 'x'.repeat(200_000) } })).rejects.toThrow(
      /BIG is 200004 bytes; this node allows 1024 per variable \(limits\.max_env_var_bytes\)/,
    );
    await expect(Sandbox.create({ envs: { 'A=B': '1' } })).rejects.toThrow(/invalid variable name "A=B"/);
    await expect(Sandbox.create({ envs: { NUL: 'a\u0000b' } })).rejects.toThrow(/NUL/);
    await expect(Sandbox.create({ metadata: { a: '1', b: '2', c: '3', d: '4', e: '5' } })).rejects.toThrow(
      /metadata has 5 entries; this node allows 4 \(limits\.max_metadata_entries\)/,
    );
    const raw = await server.api('POST', '/v2/sandboxes', {
      templateID: 'base',
      envVars: { BIG: 'x'.repeat(200_000) },
    });
    expect(raw.status).toBe(400);
    expect(raw.body.code).toBe(400);
    expect(await storedState(server)).toEqual(before);
  });

  it('refuses a build with more steps than max_build_steps, or an ENV step above max_env_var_bytes', async () => {
    const t = await server.api('POST', '/v3/templates', { name: `sreq4-steps-${run}` });
    expect(t.status).toBe(202);
    const id = t.body.templateID as string;
    try {
      const run = (cmd: string) => ({ type: 'RUN', args: [cmd] });
      const many = await server.api('POST', `/v2/templates/${id}/builds/${id}`, {
        steps: [run('true'), run('true'), run('true'), run('true')],
      });
      expect(many.status).toBe(400);
      expect(many.body.message).toBe('the build has 4 steps; this node allows 3 (limits.max_build_steps)');
      const env = await server.api('POST', `/v2/templates/${id}/builds/${id}`, {
        steps: [{ type: 'ENV', args: ['HUGE', 'z'.repeat(5000)] }],
      });
      expect(env.status).toBe(400);
      expect(env.body.message).toMatch(/steps\[0\] \(ENV\): HUGE is 5005 bytes.*limits\.max_env_var_bytes/);
      const status = await server.api('GET', `/templates/${id}/builds/${id}/status`);
      expect(status.body.status).toBe('waiting');
    } finally {
      await server.api('DELETE', `/templates/${id}`);
    }
  });

  it('refuses a fork above max_fork_count, creating nothing', async () => {
    const before = await storedState(server);
    const r = await server.api('POST', `/sandboxes/${sbx.sandboxId}/fork`, { count: 3 });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({
      code: 400,
      message: "fork count 3 is above this node's limit of 2 (limits.max_fork_count)",
    });
    expect(await storedState(server)).toEqual(before);
  });

  it('answers 429 beyond max_concurrent_creates, and starts the others', async () => {
    const answers = await Promise.all(
      [0, 1, 2, 3].map(() => server.api('POST', '/v2/sandboxes', { templateID: 'base', timeout: 120 })),
    );
    try {
      const statuses = answers.map((a) => a.status).sort();
      expect(statuses).toEqual([201, 201, 429, 429]);
      for (const a of answers.filter((x) => x.status === 429)) {
        expect(a.body.code).toBe(429);
        expect(a.body.message).toMatch(/limit 2, limits\.max_concurrent_creates\); retry later/);
        expect(a.headers.get('retry-after')).toBe('1');
      }
    } finally {
      for (const a of answers.filter((x) => x.status === 201))
        await server.api('DELETE', `/sandboxes/${a.body.sandboxID}`);
    }
    // The slots are free again.
    const again = await server.api('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60 });
    expect(again.status).toBe(201);
    await server.api('DELETE', `/sandboxes/${again.body.sandboxID}`);
  });

  it('refuses to start a sandbox from a snapshot whose resources are above the limits of this node', async () => {
    const snap = await server.api('POST', `/sandboxes/${sbx.sandboxId}/snapshots`, { name: snapName });
    expect(snap.status).toBe(201);
    expect(snap.body.cpuCount).toBe(2);
    await server.killAll();
    expect(await server.stop()).toBe(0);
    // The same node, its operator now allowing one CPU per sandbox.
    server = await startServer(
      {
        name: 'sreq4',
        toml: [
          ...LIMITS.map((l) => (l.startsWith('max_cpu_count') ? 'max_cpu_count = 1' : l)),
          '[machine]',
          'vcpu_count = 1',
        ].join('\n'),
      },
      server.port,
    );
    useSdk(server);
    try {
      const before = await storedState(server);
      const r = await server.api('POST', '/v2/sandboxes', { templateID: snapName });
      expect(r.status).toBe(400);
      expect(r.body).toEqual({
        code: 400,
        message: `template ${snapName}: cpuCount 2 is above this node's limit of 1 (limits.max_cpu_count)`,
      });
      expect(await storedState(server)).toEqual(before);
    } finally {
      await server.api('DELETE', `/templates/${snap.body.snapshotID}`);
    }
  });
});
