import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommandExitError, Sandbox } from 'e2b';
import { readFileSync } from 'node:fs';
import {
  envdPids,
  eventually,
  hostObjects,
  startServer,
  useSdk,
  warmPoolSandboxes,
  type TestServer,
} from './harness.js';
import { startFakeInternet, WAN_A, WAN_PORT, type FakeInternet } from './fixtures/fake-internet.js';

/** Pre-started sandboxes: a create takes one (renamed, /init'ed), and the pool boots a replacement. */
describe('warm sandbox pool', () => {
  let server: TestServer;
  let net: FakeInternet | undefined;
  const warmContainers = () => hostObjects(server).runcContainers.filter((c) => c.startsWith('warm-'));

  beforeAll(async () => {
    server = await startServer({ name: 'warm', warm: 2 });
    useSdk(server);
    // The base template is prewarmed at startup. Ready, not only started: a create while they still boot is a
    // miss (it boots its own sandbox), which is not what these tests are about.
    await eventually(
      async () => warmContainers().length === 2 && (await warmPoolSandboxes(server, 'ready')) === 2,
      'two pre-started sandboxes, ready',
      600,
      100,
    );
  });
  afterAll(async () => {
    await net?.close();
    expect(await server?.stop()).toBe(0);
    // Shutdown removes the pre-started sandboxes.
    expect(warmContainers()).toEqual([]);
  });

  it("warms up each pre-started sandbox's envd before any create takes it", async () => {
    // The first request an envd serves runs its /init code for the first time; the pool pays that, not a create.
    for (const c of warmContainers()) {
      const [pid] = envdPids(c);
      expect(pid, `envd of ${c}`).toBeDefined();
      const state = JSON.parse(readFileSync(`/proc/${pid}/root/run/agentenv/envd.json`, 'utf8'));
      expect(state).toEqual({ envVars: {} });
    }
    // ...and each ran a command and a file read through envd (a failed warm-up would count as failed).
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/^aenv_warm_pool_warm_ups_total\{template="[^"]+",result="ok"\} 2$/m);
    expect(metrics).not.toMatch(/^aenv_warm_pool_warm_ups_total\{[^}]*result="failed"/m);
  });

  it('hands out a pre-started sandbox that becomes the created one, then refills', async () => {
    const before = new Set(warmContainers());
    const sbx = await Sandbox.create({
      timeoutMs: 120_000,
      envs: { FROM_CREATE: 'yes' },
      metadata: { m: '1' },
    });
    const adopted = [...before].filter((c) => hostObjects(server).runcContainers.includes(c));
    // One of the pre-started containers now runs the sandbox (it is no longer idle in the pool): a hit, no
    // container booted under the sandbox's own id.
    expect(adopted).toHaveLength(2);
    expect(hostObjects(server).runcContainers).not.toContain(sbx.sandboxId);
    const r = await sbx.commands.run(
      'hostname; cat /etc/hostname; grep -c "$(hostname)" /etc/hosts; echo $FROM_CREATE; id -un',
    );
    expect(r.stdout.split('\n')).toEqual([sbx.sandboxId, sbx.sandboxId, '1', 'yes', 'user', '']);
    expect((await sbx.getInfo()).metadata).toEqual({ m: '1' });
    // The pool refills to two idle sandboxes besides the one handed out.
    await eventually(
      async () => warmContainers().length === 3 && (await warmPoolSandboxes(server, 'ready')) === 2,
      'the pool to refill',
      600,
      100,
    );

    // Everything still works on an adopted sandbox: pause/resume with memory, fork, kill.
    const bg = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 });
    expect(await sbx.pause()).toBe(true);
    await sbx.connect();
    expect((await sbx.commands.run(`kill -0 ${bg.pid} && echo alive`)).stdout).toBe('alive\n');
    const fork = await server.api('POST', `/sandboxes/${sbx.sandboxId}/fork`, { count: 1 });
    expect(fork.status).toBe(201);
    const child = await Sandbox.connect(fork.body[0].sandbox.sandboxID);
    expect((await child.commands.run('hostname')).stdout.trim()).toBe(child.sandboxId);
    await child.kill();
    expect(await sbx.kill()).toBe(true);
    await eventually(
      () => hostObjects(server).runcContainers.filter((c) => c.startsWith('warm-')).length === 2,
      'the adopted container to be removed with its sandbox',
    );
  });

  it('gives each create its own pre-started sandbox under concurrency', async () => {
    const made = await Promise.all([1, 2, 3].map(() => Sandbox.create({ timeoutMs: 60_000 })));
    const names = await Promise.all(made.map(async (s) => (await s.commands.run('hostname')).stdout.trim()));
    expect(names).toEqual(made.map((s) => s.sandboxId));
    await Promise.all(made.map((s) => s.kill()));
  });

  it("applies a create request's egress policy to a pre-started sandbox", async () => {
    // Sandbox traffic is policy-routed into a fake internet on this machine; nothing leaves it.
    net = await startFakeInternet(server.cidrs);
    const fetchWan = async (sbx: Sandbox) => {
      try {
        return (await sbx.commands.run(`curl -sS --connect-timeout 3 -m 5 http://${WAN_A}:${WAN_PORT}/`))
          .exitCode;
      } catch (e) {
        if (e instanceof CommandExitError) return e.exitCode;
        throw e;
      }
    };
    const open = await Sandbox.create({ timeoutMs: 60_000 });
    const closed = await Sandbox.create({ timeoutMs: 60_000, network: { denyOut: ['198.51.100.0/24'] } });
    expect(await fetchWan(open)).toBe(0);
    expect(await fetchWan(closed)).toBe(7);
    await Promise.all([open.kill(), closed.kill()]);
  });
});
