// Volumes on a directory both nodes share (`[volume].storage = "shared_dir"`, docs/volumes.md "Shared
// directory", docs/cluster.md#volumes-in-a-cluster): one volume, sandboxes on both nodes mounting it, a delete
// refused while any node mounts it, and a paused sandbox mounting it resumed on the other node. One cluster for
// the file (a scheduler, two nodes with heartbeats, one gateway, a shared snapshot repository for the move); the
// e2b SDK talks only to the gateway. Both nodes run on this host, so the "shared" directory is a local one.
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, Volume, VolumeError } from 'e2b';
import {
  startSchedulerProcess,
  type SchedulerProcess,
} from '../../packages/scheduler/src/testing/scheduler-process.js';
import {
  startGatewayProcess,
  type GatewayProcess,
} from '../../packages/gateway/src/testing/gateway-process.js';
import { endNode, eventually, freePort, startServer, type TestServer } from './harness.js';

const KEY = `e2b_${'5eef'.repeat(15)}`;
const NODES = ['svnodea', 'svnodeb'] as const;
const run = randomUUID().slice(0, 8);
const SHARED = `/var/lib/aenv-e2e/shared-volumes-${run}`;
const REPO = `/var/lib/aenv-e2e/shared-volumes-repo-${run}`;

describe('volumes on a directory the nodes share, through aenv gateway', () => {
  let sched: SchedulerProcess;
  let gateway: GatewayProcess;
  const nodes: TestServer[] = [];
  let ended = false;

  const gw = (path: string, init: RequestInit = {}, key: string | null = KEY) =>
    fetch(gateway.url + path, {
      ...init,
      headers: {
        ...(key ? { 'x-api-key': key } : {}),
        ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(init.headers as object),
      },
    });
  const nodeOf = async (sandboxId: string) =>
    (await gw(`/sandboxes/${sandboxId}`)).headers.get('x-agentenv-node-id');
  /** Creates sandboxes through the gateway until one lands on `node` (round robin: within a few). */
  const sandboxOn = async (node: string, vol: Volume) => {
    const extra: Sandbox[] = [];
    try {
      for (let i = 0; i < 6; i++) {
        const s = await Sandbox.create({ volumeMounts: { '/data': vol }, timeoutMs: 300_000 });
        if ((await nodeOf(s.sandboxId)) === node) return s;
        extra.push(s);
      }
      throw new Error(`no sandbox placed on ${node}`);
    } finally {
      for (const s of extra) await s.kill();
    }
  };

  beforeAll(async () => {
    mkdirSync(SHARED, { recursive: true, mode: 0o700 });
    mkdirSync(REPO, { recursive: true, mode: 0o700 });
    const ports = [await freePort(), await freePort()];
    sched = await startSchedulerProcess({
      scheduler: { nodes: NODES.map((id, i) => ({ id, endpoint: `http://127.0.0.1:${ports[i]}` })) },
    });
    // The cluster's secrets, the same on both nodes (a sandbox moving between them keeps its envd tokens).
    const env = {
      AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: randomBytes(32).toString('hex'),
      AENV_SNAPSHOT_RECORD_SIGNING_SECRET: randomBytes(32).toString('hex'),
    };
    // One after the other: the first registers the base template in the shared repository, the second finds it.
    for (const [i, id] of NODES.entries()) {
      mkdirSync(`/var/lib/aenv-e2e/${id}/secrets`, { recursive: true, mode: 0o700 });
      writeFileSync(`/var/lib/aenv-e2e/${id}/secrets/api-key`, `${KEY}\n`, { mode: 0o600 });
      nodes.push(
        await startServer(
          {
            name: id,
            env,
            toml: [
              '[cluster]',
              `scheduler_endpoint = "http://${sched.grpcAddress}"`,
              '[observability.scheduler_report]',
              'enabled = true',
              'interval_secs = 1',
              '[node_identity]',
              `node_id = "${id}"`,
              '[volume]',
              'max_size_mb = 1',
              'storage = "shared_dir"',
              `shared_dir = "${SHARED}"`,
              '[snapshot]',
              'repository_backend = "posix_fs"',
              '[backend.posix_fs]',
              `snapshot_store = "${REPO}"`,
            ].join('\n'),
          },
          ports[i],
        ),
      );
    }
    gateway = await startGatewayProcess({ scheduler_addr: sched.grpcAddress, debug_mode: true }, KEY);
    process.env.E2B_API_URL = gateway.url;
    process.env.E2B_SANDBOX_URL = gateway.url;
    process.env.E2B_VOLUME_API_URL = gateway.url;
    process.env.E2B_API_KEY = KEY;
    await eventually(
      async () => ((await (await gw('/nodes')).json()) as unknown[]).length === 2,
      'both nodes to heartbeat',
      300,
      100,
    );
  });
  afterAll(async () => {
    if (!ended)
      for (const n of nodes) {
        await n.killAll().catch(() => {});
        await n.shutdown().catch(() => {});
      }
    await gateway?.stop();
    await sched?.stop();
    rmSync(SHARED, { recursive: true, force: true });
    rmSync(REPO, { recursive: true, force: true });
  });

  let vol: Volume;
  const sandboxes: Sandbox[] = [];

  it('one volume on both nodes: listed once, its content reachable through either', async () => {
    vol = await Volume.create('common');
    for (const n of nodes) {
      const listed = (await n.api('GET', '/volumes')).body as { volumeID: string; name: string }[];
      expect(listed).toEqual([{ volumeID: vol.volumeId, name: 'common' }]);
    }
    expect((await Volume.list()).map((v) => [v.volumeId, v.name])).toEqual([[vol.volumeId, 'common']]);
    const dup = await gw('/volumes', { method: 'POST', body: JSON.stringify({ name: 'common' }) });
    expect(dup.status).toBe(409);
    await vol.writeFile('/hello.txt', 'from the gateway');
    expect(await vol.readFile('/hello.txt')).toBe('from the gateway');
    expect(readdirSync(join(SHARED, 'data', vol.volumeId))).toEqual(['hello.txt']);
    // The size limit (1 MiB here) on content-API writes: no quota on a shared directory, the node keeps it.
    const big = await vol.writeFile('/big', new ArrayBuffer(2 * 1024 * 1024)).catch((e: unknown) => e);
    expect(big).toBeInstanceOf(VolumeError);
    expect(String(big)).toMatch(/507|full/);
  });

  it('sandboxes on both nodes mount it: what one writes the other reads', async () => {
    sandboxes.push(await sandboxOn(NODES[0], vol), await sandboxOn(NODES[1], vol));
    const [a, b] = sandboxes as [Sandbox, Sandbox];
    expect([await nodeOf(a.sandboxId), await nodeOf(b.sandboxId)]).toEqual([...NODES]);
    expect((await b.commands.run('cat /data/hello.txt')).stdout).toBe('from the gateway');
    await a.commands.run('echo written-on-a > /data/from-a.txt');
    expect((await b.commands.run('cat /data/from-a.txt')).stdout).toBe('written-on-a\n');
    await b.commands.run('mkdir -p /data/d && echo written-on-b > /data/d/from-b.txt');
    expect((await a.commands.run('cat /data/d/from-b.txt')).stdout).toBe('written-on-b\n');
    expect(await vol.readFile('/d/from-b.txt')).toBe('written-on-b\n');
    // A uid written in one sandbox reads back the same in the other (one image range on both nodes).
    await a.commands.run('touch /data/owned && chown 1234:1234 /data/owned', { user: 'root' });
    expect((await b.commands.run('stat -c %u:%g /data/owned')).stdout.trim()).toBe('1234:1234');
    expect(await vol.getInfo('/owned')).toMatchObject({ uid: 1234, gid: 1234 });
  });

  it('refuses the delete while any node mounts it, through either node', async () => {
    for (const n of nodes) {
      const r = await n.api('DELETE', `/volumes/${vol.volumeId}`);
      expect(r.status).toBe(409);
      expect((r.body as { message: string }).message).toMatch(/is mounted by sandbox/);
    }
    // Only B's sandbox left: A's node refuses it naming B's node.
    await sandboxes[0]!.kill();
    await eventually(
      async () => {
        const r = await nodes[0]!.api('DELETE', `/volumes/${vol.volumeId}`);
        return r.status === 409 && /on node svnodeb/.test((r.body as { message: string }).message);
      },
      "node A to refuse the delete naming node B's sandbox",
      100,
      100,
    );
    const refused = await Volume.destroy(vol.volumeId).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(VolumeError);
  });

  it('a paused sandbox mounting it resumes on the other node, with the volume', async () => {
    const b = sandboxes[1]!;
    const paused = () =>
      nodes[1]!
        .logs()
        .split('\n')
        .filter((l) => l.includes('"paused sandbox copied to the repository"') && l.includes(b.sandboxId))
        .length;
    expect((await nodes[1]!.api('POST', `/sandboxes/${b.sandboxId}/pause`)).status).toBe(204);
    await eventually(async () => paused() > 0, 'the pause to reach the repository', 600, 100);
    await vol.writeFile('/while-paused.txt', 'written while paused');
    // Resumed on A (asked there directly, as a gateway does when B is away).
    const r = await nodes[0]!.api('POST', `/sandboxes/${b.sandboxId}/connect`, { timeout: 300 });
    expect(r.status, JSON.stringify(r.body)).toBeLessThan(300);
    expect(nodes[0]!.logs()).toContain('"took over a sandbox paused on another node"');
    // B, alive all along, still names its stale paused copy in its heartbeats (the last roster wins the binding)
    // until it reads the claim and drops the copy (every 10 s, docs/cluster.md#sandbox-ownership).
    const onB = async () =>
      (
        (await nodes[1]!.api('GET', '/v2/sandboxes?state=running&state=paused')).body as {
          sandboxID: string;
        }[]
      ).some((s) => s.sandboxID === b.sandboxId);
    await eventually(async () => !(await onB()), 'B to drop its stale copy', 300, 100);
    expect(nodes[1]!.logs()).toContain('"sandbox moved to another node; dropping the local copy"');
    // A heartbeat of B's sent before the drop may still arrive: wait past one interval (1 s), then A holds it.
    await new Promise((r) => setTimeout(r, 1500));
    await eventually(
      async () => (await nodeOf(b.sandboxId)) === NODES[0],
      'the gateway to route to A',
      100,
      100,
    );
    const moved = await Sandbox.connect(b.sandboxId);
    expect((await moved.commands.run('cat /data/while-paused.txt /data/d/from-b.txt')).stdout).toBe(
      'written while pausedwritten-on-b\n',
    );
    await moved.commands.run('echo after-the-move > /data/moved.txt');
    expect(await vol.readFile('/moved.txt')).toBe('after-the-move\n');
    sandboxes[1] = moved;
  });

  it('allows the delete once every sandbox is gone, and refuses traversal', async () => {
    const token = (id: string) => createHmac('sha256', KEY).update(`aenv-volume:${id}`).digest('hex');
    const content = (path: string) =>
      gw(path, { headers: { authorization: `Bearer ${token(vol.volumeId)}` } }, null);
    for (const p of [
      `/volumecontent/${vol.volumeId}/file?path=../../meta/${vol.volumeId}.json`,
      `/volumecontent/${vol.volumeId}/dir?path=/../../leases`,
      `/volumecontent/${vol.volumeId}/file?path=%2e%2e/%2e%2e/names/common`,
    ]) {
      const r = await content(p);
      expect(r.status, p).toBe(400);
      await r.arrayBuffer();
    }
    // A symlink a sandbox plants to the shared directory's own files is not followed by the content API.
    await sandboxes[1]!.commands.run(`ln -s ${SHARED}/meta /data/meta-link && ln -s ../.. /data/up`);
    for (const p of ['/meta-link', '/up']) {
      const r = await content(`/volumecontent/${vol.volumeId}/dir?path=${p}`);
      expect(r.status, p).toBe(400);
      await r.arrayBuffer();
    }
    const via = await content(`/volumecontent/${vol.volumeId}/file?path=/up/meta/${vol.volumeId}.json`);
    expect(via.status).toBe(400);
    await via.arrayBuffer();
    await sandboxes[1]!.kill();
    // B's lease went with its stale copy (above); A's goes with the kill.
    await eventually(
      async () => {
        const r = await gw(`/volumes/${vol.volumeId}`, { method: 'DELETE' });
        await r.arrayBuffer();
        return r.status === 204;
      },
      'the delete to be allowed once no node mounts the volume',
      300,
      200,
    );
    await expect(Volume.getInfo(vol.volumeId)).rejects.toThrow(/not found/);
    for (const d of ['data', 'meta', 'names', 'deleting'])
      expect(readdirSync(join(SHARED, d)), d).toEqual([]);
    expect(existsSync(join(SHARED, 'data', vol.volumeId))).toBe(false);
    expect(await Sandbox.list().nextItems()).toEqual([]);
    ended = true;
    for (const n of nodes) expect(await endNode(n)).toEqual({ stray: [], exitCode: 0 });
  });
});
