// Server restarts: a clean SIGTERM exit, kill -9 with running sandboxes (re-adopted with their processes and
// files, or cleaned up when their container died meanwhile), and no host object left behind afterwards.
import { execFileSync } from 'node:child_process';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  NO_HOST_OBJECTS,
  eventually,
  hostObjects,
  startServer,
  strayHostObjects,
  useSdk,
  type TestServer,
} from './harness.js';

const NAME = 'rst';

describe('server restarts', () => {
  let server: TestServer | undefined;

  afterAll(async () => {
    if (server) await server.shutdown();
  });

  /** Starts the node on its state dir and port; a node still running from the previous test is stopped first. */
  const start = async () => {
    if (server) await server.stop();
    server = server ? await server.restart() : await startServer({ name: NAME });
    useSdk(server);
    return server;
  };

  it('exits 0 on SIGTERM with no sandboxes', async () => {
    const s = await start();
    expect(await s.killAll()).toBeGreaterThanOrEqual(0);
    expect(await s.stop()).toBe(0);
    expect(s.logs()).toContain('shutdown complete');
  });

  it('exits on SIGTERM while a client holds an idle connection', async () => {
    const s = await start();
    // The e2b SDK leaves such a connection behind after WatchHandle.stop() (its health probe's pooled socket).
    const idle = connect(s.port, '127.0.0.1');
    await new Promise<void>((resolve, reject) => idle.once('connect', resolve).once('error', reject));
    try {
      const exited = s.stop();
      const outcome = await Promise.race([
        exited.then((code) => `exit ${code}`),
        new Promise<string>((r) => setTimeout(() => r('still running 30 s after SIGTERM'), 30_000)),
      ]);
      expect(outcome).toBe('exit 0');
    } finally {
      idle.destroy();
      await s.stop();
    }
  });

  it('refuses a second server on the same home and leaves the first one and its sandboxes alone', async () => {
    const s = await start();
    const sbx = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      await expect(startServer({ name: NAME })).rejects.toThrow(
        /another aenv server \(pid \d+\) is running with home_path/,
      );
      expect((await sbx.commands.run('echo still here')).stdout).toBe('still here\n');
      expect((await s.api('GET', '/health')).status).toBe(204);
    } finally {
      await sbx.kill();
    }
  });

  it('re-adopts a running sandbox after kill -9, with its processes and files', async () => {
    let s = await start();
    const sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { suite: 'restart' } });
    await sbx.files.write('kept.txt', 'survives the server');
    const bg = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 });
    await bg.disconnect();
    const before = await sbx.getInfo();

    await s.crash();
    // The sandbox keeps running without its server.
    expect(hostObjects(s).runcContainers).toContain(sbx.sandboxId);
    s = await start();

    const info = await sbx.getInfo();
    expect(info.state).toBe('running');
    expect(info.metadata).toEqual({ suite: 'restart' });
    expect(info.endAt.getTime()).toBe(before.endAt.getTime());
    expect(await sbx.isRunning()).toBe(true);
    expect(await sbx.files.read('kept.txt')).toBe('survives the server');
    expect((await sbx.commands.run(`cat /proc/${bg.pid}/cmdline | tr '\\0' ' '`)).stdout).toBe('sleep 600 ');
    expect((await sbx.commands.run('echo new-command')).stdout).toBe('new-command\n');
    expect(await strayHostObjects(s)).toEqual([]);

    expect(await sbx.kill()).toBe(true);
    expect(await strayHostObjects(s)).toEqual([]);
  });

  it('removes a sandbox whose container died while the server was down', async () => {
    let s = await start();
    const doomed = await Sandbox.create({ timeoutMs: 300_000 });
    const survivor = await Sandbox.create({ timeoutMs: 300_000 });
    await s.crash();

    const runc = ['--root', join(s.runtimePath, 'runc')];
    execFileSync('runc', [...runc, 'kill', doomed.sandboxId, 'KILL']);
    await eventually(
      () =>
        !execFileSync('runc', [...runc, 'state', doomed.sandboxId], { encoding: 'utf8' }).includes(
          '"running"',
        ),
      'the container to stop',
    );
    s = await start();

    expect((await s.api('GET', `/sandboxes/${doomed.sandboxId}`)).status).toBe(404);
    expect(await doomed.isRunning()).toBe(false);
    expect((await survivor.commands.run('echo still-here')).stdout).toBe('still-here\n');
    const leftovers = hostObjects(s);
    expect(leftovers.runcContainers).not.toContain(doomed.sandboxId);
    expect(leftovers.cgroups.filter((c) => c.includes(doomed.sandboxId))).toEqual([]);
    expect(leftovers.mounts.filter((m) => m.includes(doomed.sandboxId))).toEqual([]);
    expect(await strayHostObjects(s)).toEqual([]);
    await survivor.kill();
  });

  it('leaves nothing on the host once the sandboxes are killed and the server stops', async () => {
    let s = await start();
    const sbx = await Sandbox.create({ timeoutMs: 300_000 });
    await s.crash();
    s = await start();
    expect(await sbx.kill()).toBe(true);
    expect(await s.stop()).toBe(0);
    expect(hostObjects(s)).toEqual(NO_HOST_OBJECTS);
    server = undefined;
  });
});
