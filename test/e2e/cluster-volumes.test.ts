// Volumes in a cluster (docs/cluster.md#volumes-in-a-cluster): a volume lives on the node that created it, and
// the gateway sends its calls, its content API and every create that mounts it there. One cluster for the file:
// a scheduler, two nodes with heartbeats, one gateway, a snapshot repository both nodes share (so that any node
// can launch a snapshot, and only the gateway's placement keeps a launch with the volumes it mounts again); the
// e2b SDK talks only to the gateway.
import { createHmac, randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthenticationError, Sandbox, Volume, VolumeError } from 'e2b';
import {
  startSchedulerProcess,
  type SchedulerProcess,
} from '../../packages/scheduler/src/testing/scheduler-process.js';
import {
  startGatewayProcess,
  type GatewayProcess,
} from '../../packages/gateway/src/testing/gateway-process.js';
import { endNode, eventually, freePort, startServer, type TestServer } from './harness.js';

const KEY = `e2b_${'5eed'.repeat(15)}`;
const REGISTRY = process.env.AENV_TEST_REGISTRY ?? '127.0.0.1:5000';
const NODES = ['cvnodea', 'cvnodeb'] as const;
const REPO = `/var/lib/aenv-e2e/cvrepo-${Date.now().toString(36)}`;

describe('volumes through aenv gateway', () => {
  let sched: SchedulerProcess;
  let gateway: GatewayProcess;
  const nodes: TestServer[] = [];
  let ended = false;

  /** A request to the gateway; `key` null sends no API key. JSON bodies are labelled as the SDK labels them. */
  const gw = (path: string, init: RequestInit = {}, key: string | null = KEY) =>
    fetch(gateway.url + path, {
      ...init,
      headers: {
        ...(key ? { 'x-api-key': key } : {}),
        ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(init.headers as object),
      },
    });
  /** The node (by id) whose own API lists volume `id`. */
  const holder = async (id: string): Promise<string[]> => {
    const out: string[] = [];
    for (const [i, n] of nodes.entries()) {
      const r = await n.api('GET', '/volumes');
      if ((r.body as { volumeID: string }[]).some((v) => v.volumeID === id)) out.push(NODES[i]!);
    }
    return out;
  };

  beforeAll(async () => {
    const ports = [await freePort(), await freePort()];
    sched = await startSchedulerProcess({
      scheduler: { nodes: NODES.map((id, i) => ({ id, endpoint: `http://127.0.0.1:${ports[i]}` })) },
    });
    mkdirSync(REPO, { recursive: true, mode: 0o700 });
    // The secrets nodes sharing a repository must have alike (docs/cluster.md).
    const env = {
      AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: randomBytes(32).toString('hex'),
      AENV_SNAPSHOT_RECORD_SIGNING_SECRET: randomBytes(32).toString('hex'),
    };
    // One after the other: the first registers the base template in the shared repository, the second finds it.
    for (const [i, id] of NODES.entries()) {
      // One API key for the whole cluster: it is also what volume content tokens derive from.
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
              'max_size_mb = 64',
              '[snapshot]',
              'repository_backend = "posix_fs"',
              '[backend.posix_fs]',
              `snapshot_store = "${REPO}"`,
              // Cold starts pull only from the loopback registry.
              '[image.resolver]',
              `insecure_registries = ["${REGISTRY}"]`,
              `allowed_registries = ["${REGISTRY}"]`,
              `search_registries = ["${REGISTRY}"]`,
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
    for (const v of await Volume.list()) await Volume.destroy(v.volumeId); // a failed earlier run's
  });
  afterAll(async () => {
    // A failed test leaves the nodes running: stop them (the last test ends them and checks for leaks).
    if (!ended)
      for (const n of nodes) {
        await n.killAll().catch(() => {});
        await n.shutdown().catch(() => {});
      }
    await gateway?.stop();
    await sched?.stop();
    rmSync(REPO, { recursive: true, force: true });
  });

  const volumes: Volume[] = [];
  it('creates volumes on scheduled nodes, lists them merged and reaches each one’s node', async () => {
    // Round robin: two creates in a row land on both nodes.
    volumes.push(await Volume.create('alpha'), await Volume.create('beta'));
    const [a, b] = volumes as [Volume, Volume];
    const holders = [await holder(a.volumeId), await holder(b.volumeId)];
    expect(holders.map((h) => h.length)).toEqual([1, 1]);
    expect(new Set(holders.flat())).toEqual(new Set(NODES));
    // A name another node has is refused as one node refuses it.
    const dup = await gw('/volumes', { method: 'POST', body: JSON.stringify({ name: 'alpha' }) });
    expect([dup.status, await dup.json()]).toEqual([
      409,
      { code: 409, message: 'a volume named "alpha" already exists' },
    ]);
    expect((await Volume.list()).map((v) => v.name)).toEqual(['alpha', 'beta']);
    for (const v of volumes) {
      const info = await Volume.getInfo(v.volumeId);
      expect(info).toMatchObject({ name: v.name, volumeId: v.volumeId });
      const r = await gw(`/volumes/${v.volumeId}`);
      expect(r.headers.get('x-agentenv-node-id')).toBe((await holder(v.volumeId))[0]);
    }
    // The content API with the volume's token, no API key: write, read, list on each volume's node.
    await a.writeFile('/hello.txt', 'from the gateway');
    await b.makeDir('/dir');
    expect(await a.readFile('/hello.txt')).toBe('from the gateway');
    expect((await a.list('/')).map((e) => e.name)).toEqual(['hello.txt']);
    expect((await b.list('/')).map((e) => e.name)).toEqual(['dir']);
  });

  it('places every sandbox mounting a volume on its node; two share its files', async () => {
    const a = volumes[0]!;
    const home = (await holder(a.volumeId))[0];
    const s1 = await Sandbox.create({ volumeMounts: { '/data': a }, timeoutMs: 120_000 });
    const s2 = await Sandbox.create({ volumeMounts: { '/data': 'alpha' }, timeoutMs: 120_000 });
    for (const s of [s1, s2]) {
      const r = await gw(`/sandboxes/${s.sandboxId}`);
      expect(r.headers.get('x-agentenv-node-id')).toBe(home);
    }
    expect((await s2.commands.run('cat /data/hello.txt')).stdout).toBe('from the gateway');
    await s1.commands.run('echo shared > /data/from-s1.txt');
    expect((await s2.commands.run('cat /data/from-s1.txt')).stdout).toBe('shared\n');
    expect(await a.readFile('/from-s1.txt')).toBe('shared\n');

    // Volumes of two nodes in one sandbox, an unknown name: refused before any node creates anything.
    const split = await gw('/v2/sandboxes', {
      method: 'POST',
      body: JSON.stringify({
        templateID: 'base',
        volumeMounts: [
          { name: 'alpha', path: '/a' },
          { name: 'beta', path: '/b' },
        ],
      }),
    });
    expect(split.status).toBe(409);
    expect(((await split.json()) as { message: string }).message).toMatch(
      /volumes live on different nodes .*"alpha" on cvnode[ab], "beta" on cvnode[ab]/,
    );
    const unknown = await gw('/v2/sandboxes', {
      method: 'POST',
      body: JSON.stringify({ templateID: 'base', volumeMounts: [{ name: 'gamma', path: '/g' }] }),
    });
    expect([unknown.status, await unknown.json()]).toEqual([
      404,
      { code: 404, message: 'volume "gamma" not found' },
    ]);
    // A malformed mount goes to a node, which refuses it as it does on its own.
    const bad = await gw('/v2/sandboxes', {
      method: 'POST',
      body: JSON.stringify({ templateID: 'base', volumeMounts: [{ name: 'alpha', path: '/proc/x' }] }),
    });
    expect(bad.status).toBe(400);
    expect(((await Sandbox.list().nextItems()) as unknown[]).length).toBe(2);

    // Deleting a mounted volume is refused until no sandbox uses it.
    const refused = await Volume.destroy(a.volumeId).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(VolumeError);
    expect(String(refused)).toMatch(/mounted by sandbox/);
    await s1.kill();
    await s2.kill();
    expect(await Volume.destroy(a.volumeId)).toBe(true);
    expect(await Volume.destroy(a.volumeId)).toBe(false);
    await expect(Volume.getInfo(a.volumeId)).rejects.toThrow(/not found/);
    expect((await Volume.list()).map((v) => v.name)).toEqual(['beta']);
    expect(await volumes[1]!.exists('/dir')).toBe(true);
  });

  it('places a cold start mounting a volume on its node, which mounts it', async () => {
    const b = volumes[1]!;
    const r = await gw('/sandboxes-cold', {
      method: 'POST',
      body: JSON.stringify({
        image: `${REGISTRY}/aenv/busybox:latest`,
        timeout: 120,
        volumeMounts: [{ name: 'beta', path: '/data' }],
      }),
    });
    const created = (await r.json()) as { sandboxID: string; message?: string };
    expect(r.status, created.message).toBe(201);
    expect(r.headers.get('x-agentenv-node-id')).toBe((await holder(b.volumeId))[0]);
    // busybox has no bash for commands.run: the files API shows the mount.
    const s = await Sandbox.connect(created.sandboxID);
    expect((await s.files.list('/data')).map((e) => e.name)).toEqual(['dir']);
    await s.files.write('/data/cold.txt', 'cold');
    expect(await b.readFile('/cold.txt')).toBe('cold');
    await s.kill();
  });

  it('launches a snapshot taken with a volume mounted on the volume’s node, every time', async () => {
    const b = volumes[1]!;
    const home = (await holder(b.volumeId))[0]!;
    const other = NODES.find((n) => n !== home)!;
    const nodeOf = async (id: string) => (await gw(`/sandboxes/${id}`)).headers.get('x-agentenv-node-id');
    const source = await Sandbox.create({ volumeMounts: { '/data': b }, timeoutMs: 120_000 });
    expect(await nodeOf(source.sandboxId)).toBe(home);
    await source.commands.run('echo from-source > /data/snap.txt');
    const snap = await source.createSnapshot();
    await source.kill();
    // The node's GET of the snapshot shows what a launch mounts again (aenv's extension field).
    const shown = await gw(`/templates/${snap.snapshotId}`);
    expect(((await shown.json()) as { volumeMounts?: unknown }).volumeMounts).toEqual([
      { volumeID: b.volumeId, name: 'beta', path: '/data' },
    ]);
    // Any node could launch it (a shared repository); each launch goes where the volume is, and mounts it.
    const launched: Sandbox[] = [];
    for (let i = 0; i < 6; i++) {
      const s = await Sandbox.create(snap.snapshotId, { timeoutMs: 120_000 });
      launched.push(s);
      expect(await nodeOf(s.sandboxId)).toBe(home);
      expect((await s.commands.run('cat /data/snap.txt')).stdout).toBe('from-source\n');
    }
    await launched[0]!.commands.run('echo from-launch > /data/launch.txt');
    expect(await b.readFile('/launch.txt')).toBe('from-launch\n');
    // The request's own volume at the snapshot's path replaces it: the launch follows that volume instead.
    const otherNode = nodes[NODES.indexOf(other)]!;
    const made = await otherNode.api('POST', '/volumes', { name: 'gamma' });
    expect(made.status).toBe(201);
    const gamma = made.body as { volumeID: string };
    const replaced = await gw('/v2/sandboxes', {
      method: 'POST',
      body: JSON.stringify({
        templateID: snap.snapshotId,
        timeout: 120,
        volumeMounts: [{ name: 'gamma', path: '/data/' }],
      }),
    });
    const r = (await replaced.json()) as { sandboxID: string; message?: string };
    expect(replaced.status, r.message).toBe(201);
    expect(replaced.headers.get('x-agentenv-node-id')).toBe(other);
    const onOther = await Sandbox.connect(r.sandboxID);
    expect((await onOther.files.list('/data')).map((e) => e.name)).toEqual([]);
    // Beside the snapshot's volume, a volume of the other node: 409, as for a create naming both.
    const split = await gw('/v2/sandboxes', {
      method: 'POST',
      body: JSON.stringify({ templateID: snap.snapshotId, volumeMounts: [{ name: 'gamma', path: '/g' }] }),
    });
    expect(split.status).toBe(409);
    expect(((await split.json()) as { message: string }).message).toMatch(
      /volumes live on different nodes .*"gamma" on cvnode[ab], "beta" \(the snapshot's, at \/data\) on cvnode[ab]/,
    );
    // Deletes are refused while a launch mounts the volume, as before.
    const refused = await Volume.destroy(b.volumeId).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(VolumeError);
    expect(String(refused)).toMatch(/mounted by sandbox/);
    await onOther.kill();
    expect(await Volume.destroy(gamma.volumeID)).toBe(true);
    for (const s of launched) await s.kill();
    expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(true);
  });

  it('a paused sandbox mounting a volume stays on its node: the other node refuses it, a drain keeps it, it resumes at home', async () => {
    const b = volumes[1]!;
    const home = (await holder(b.volumeId))[0]!;
    const hi = NODES.indexOf(home as (typeof NODES)[number]);
    const other = nodes[1 - hi]!;
    const s = await Sandbox.create({ volumeMounts: { '/data': b }, timeoutMs: 120_000 });
    const id = s.sandboxId;
    await s.commands.run('echo on-volume > /data/stays.txt && echo on-disk > /home/user/disk.txt');
    const copied = () =>
      nodes[hi]!.logs()
        .split('\n')
        .filter((l) => l.includes('"paused sandbox copied to the repository"') && l.includes(id)).length;
    await s.pause();
    // Its pause is in the shared repository, where any node could take it — but only its node has the volume.
    await eventually(async () => copied() > 0, 'the pause to reach the repository', 600, 100);
    const refusal = {
      code: 503,
      message: `sandbox ${id} mounts volume "beta", which is not on node ${NODES[1 - hi]}: it resumes only on node ${home}, which holds the volume; try again once that node serves it`,
    };
    expect(await other.api('POST', `/sandboxes/${id}/connect`, { timeout: 60 })).toMatchObject({
      status: 503,
      body: refusal,
    });
    expect(await other.api('GET', `/sandboxes/${id}`)).toMatchObject({ status: 503, body: refusal });
    expect(await other.api('DELETE', `/sandboxes/${id}`)).toMatchObject({ status: 503, body: refusal });

    // A drain of its node pauses and keeps it there; the gateway, moving a connect off the draining node, gets
    // the other node's refusal, and nothing changes hands.
    expect((await nodes[hi]!.api('POST', `/nodes/${home}/drain`)).status).toBe(202);
    await eventually(
      async () => (await nodes[hi]!.api('GET', `/nodes/${home}`)).body?.drain?.done === true,
      'the drain to finish',
      600,
      100,
    );
    expect((await nodes[hi]!.api('GET', `/nodes/${home}`)).body.drain).toMatchObject({
      handedOver: 0,
      failed: 0,
      kept: 1,
      paused: 1,
    });
    expect(nodes[hi]!.logs()).toContain('drain: sandbox kept on this node: it mounts volume \\"beta\\"');
    const connectVia = () => gw(`/sandboxes/${id}/connect`, { method: 'POST', body: '{"timeout":60}' });
    let moved: Response | undefined;
    await eventually(
      async () => {
        moved = await connectVia();
        if (moved.headers.get('x-agentenv-node-id') === NODES[1 - hi]) return true;
        await moved.arrayBuffer();
        return false;
      },
      'the gateway to move a connect off the draining node',
      300,
      100,
    );
    expect([moved!.status, await moved!.json()]).toEqual([503, refusal]);
    expect((await other.api('GET', `/sandboxes/${id}`)).status).toBe(503);

    // Back after a restart, its node resumes it with the volume and its own disk.
    await nodes[hi]!.stop();
    nodes[hi] = await nodes[hi]!.restart();
    await eventually(
      async () => {
        const r = await connectVia();
        await r.arrayBuffer();
        return r.status < 300;
      },
      'the sandbox to resume on its node',
      600,
      100,
    );
    expect((await gw(`/sandboxes/${id}`)).headers.get('x-agentenv-node-id')).toBe(home);
    const back = await Sandbox.connect(id);
    expect((await back.commands.run('cat /data/stays.txt /home/user/disk.txt')).stdout).toBe(
      'on-volume\non-disk\n',
    );
    expect(other.logs()).not.toContain('"took over a sandbox paused on another node"');
    await back.kill();
  });

  it('refuses hostile volume requests at the gateway', async () => {
    const b = volumes[1]!;
    const missing = '00000000-0000-4000-8000-000000000000';
    const token = (id: string) => createHmac('sha256', KEY).update(`aenv-volume:${id}`).digest('hex');
    const content = (path: string, auth?: string, init: RequestInit = {}) =>
      gw(path, { ...init, headers: auth ? { authorization: auth } : {} }, null);
    const expectAnswer = async (r: Response, status: number, message?: RegExp) => {
      expect(r.status, `${r.url} ${status}`).toBe(status);
      if (message) expect(((await r.json()) as { message: string }).message).toMatch(message);
      else await r.arrayBuffer();
    };
    const noToken = /a valid volume token/;
    // The content API: no token, another volume's, a malformed one, the API key of another cluster.
    await expectAnswer(await content(`/volumecontent/${b.volumeId}/dir?path=/`), 401, noToken);
    await expectAnswer(
      await content(`/volumecontent/${b.volumeId}/dir?path=/`, `Bearer ${token(missing)}`),
      401,
      noToken,
    );
    await expectAnswer(await content(`/volumecontent/${b.volumeId}/dir?path=/`, 'Bearer'), 401, noToken);
    await expectAnswer(
      await gw(`/volumecontent/${b.volumeId}/dir?path=/`, {}, `e2b_${'0'.repeat(40)}`),
      401,
      noToken,
    );
    // A valid token of a volume no node has: 404; junk ids and paths: 401 before any lookup.
    await expectAnswer(
      await content(`/volumecontent/${missing}/dir?path=/`, `Bearer ${token(missing)}`),
      404,
      /not found/,
    );
    for (const p of [
      '/volumecontent/..%2f..%2fetc/dir?path=/',
      `/volumecontent/${b.volumeId.toUpperCase()}/dir?path=/`,
      `/volumecontent/${b.volumeId}/nope?path=/`,
    ])
      await expectAnswer(await content(p, `Bearer ${token(b.volumeId)}`), 401, noToken);
    // The SDK with a wrong token: its AuthenticationError.
    const forged = new Volume(b.volumeId, b.name, token(missing));
    expect(await forged.list('/').catch((e: unknown) => e)).toBeInstanceOf(AuthenticationError);
    // Traversal through the volume's own path is the node's to refuse (as on one node).
    await expectAnswer(
      await content(
        `/volumecontent/${b.volumeId}/file?path=../../../etc/passwd`,
        `Bearer ${token(b.volumeId)}`,
      ),
      400,
    );
    // The control plane: the API key, ids that name nothing, bodies.
    await expectAnswer(await gw('/volumes', {}, null), 401);
    await expectAnswer(await gw(`/volumes/${b.volumeId}`, { method: 'DELETE' }, null), 401);
    for (const id of ['..%2f..%2fsandboxes', 'x'.repeat(200), missing.toUpperCase(), missing])
      await expectAnswer(await gw(`/volumes/${id}`), 404, /not found/);
    await expectAnswer(
      await gw('/volumes', { method: 'POST', body: JSON.stringify({ name: 'x'.repeat(5000) }) }),
      413,
      /larger than 4096/,
    );
    for (const body of ['{', JSON.stringify({ name: '../etc' }), JSON.stringify({ name: 'ok', size: 1 })])
      await expectAnswer(await gw('/volumes', { method: 'POST', body }), 400);
    await expectAnswer(
      await gw('/v2/sandboxes', {
        method: 'POST',
        body: JSON.stringify({
          templateID: 'base',
          volumeMounts: [{ name: 'a'.repeat(70_000), path: '/x' }],
        }),
      }),
      413,
    );
    expect((await Volume.list()).map((v) => v.name)).toEqual(['beta']);
    expect(await Volume.destroy(b.volumeId)).toBe(true);
    expect(await Sandbox.list().nextItems()).toEqual([]);
    ended = true;
    for (const n of nodes) expect(await endNode(n)).toEqual({ stray: [], exitCode: 0 });
  });
});
