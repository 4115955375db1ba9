// Templates and snapshots through a gateway on two nodes (docs/cluster.md#templates-and-snapshots-in-a-cluster).
// Sharing no repository, a template built through the gateway lives on one node, yet the SDK lists it, uploads
// its files, and every create from it lands on that node; a snapshot likewise. Sharing a directory repository,
// the build's calls still reach one node, the list names the template once, and creates use both nodes.
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, Template } from 'e2b';
import {
  startSchedulerProcess,
  type SchedulerProcess,
} from '../../packages/scheduler/src/testing/scheduler-process.js';
import {
  schedulerClient,
  type Plain,
  type TestSchedulerClient,
} from '../../packages/scheduler/src/testing/grpc-client.js';
import {
  startGatewayProcess,
  type GatewayProcess,
} from '../../packages/gateway/src/testing/gateway-process.js';
import { endNode, freePort, startServer, type TestServer } from './harness.js';

const KEY = `e2b_${'7e3c1a'.repeat(10)}`;
const BASE = 'oci:/var/cache/aenv/images/base:latest';
const NAME = `cl-${Date.now().toString(36)}`;

type Repository = 'local' | 'shared';

describe.each<Repository>(['local', 'shared'])(
  'templates and snapshots through aenv gateway (%s)',
  (repo) => {
    const NODES = repo === 'local' ? ['gwtmpla', 'gwtmplb'] : ['gwtsa', 'gwtsb'];
    // The shared directory and the secrets nodes sharing a repository must have alike (docs/cluster.md).
    const shared = `/var/lib/aenv-e2e/tmplshared-${Date.now().toString(36)}`;
    const sharedEnv = {
      AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: randomBytes(32).toString('hex'),
      AENV_SNAPSHOT_RECORD_SIGNING_SECRET: randomBytes(32).toString('hex'),
    };
    let sched: SchedulerProcess;
    let rpc: TestSchedulerClient;
    let gateway: GatewayProcess;
    const nodes: TestServer[] = [];
    const sandboxes: Sandbox[] = [];
    let ctx: string;

    const gw = (path: string, init: RequestInit = {}) =>
      fetch(gateway.url + path, { ...init, headers: { 'x-api-key': KEY, ...(init.headers as object) } });
    const boundNode = async (sandboxId: string) =>
      ((await rpc.call('LookupNode', { sandbox_id: sandboxId })).node as Plain).node_id as string;

    beforeAll(async () => {
      const ports = [await freePort(), await freePort()];
      sched = await startSchedulerProcess({
        scheduler: { nodes: NODES.map((id, i) => ({ id, endpoint: `http://127.0.0.1:${ports[i]}` })) },
      });
      rpc = schedulerClient(sched.grpcAddress);
      if (repo === 'shared') mkdirSync(shared, { recursive: true, mode: 0o700 });
      for (const [i, id] of NODES.entries()) {
        // One API key for the cluster (docs/cluster.md#secrets-that-must-be-shared).
        mkdirSync('/var/lib/aenv-e2e', { recursive: true, mode: 0o711 });
        mkdirSync(`/var/lib/aenv-e2e/${id}`, { recursive: true, mode: 0o711 });
        mkdirSync(`/var/lib/aenv-e2e/${id}/secrets`, { recursive: true, mode: 0o700 });
        writeFileSync(`/var/lib/aenv-e2e/${id}/secrets/api-key`, `${KEY}\n`, { mode: 0o600 });
        const toml = [
          ...(repo === 'shared'
            ? [
                '[snapshot]',
                'repository_backend = "posix_fs"',
                '[backend.posix_fs]',
                `snapshot_store = "${shared}"`,
                // posix_fs is shared between nodes only in a cluster (docs/cluster.md#sandboxes-that-move).
                '[cluster]',
                `scheduler_endpoint = "http://${sched.grpcAddress}"`,
              ]
            : []),
          '[node_identity]',
          `node_id = "${id}"`,
        ].join('\n');
        nodes.push(
          await startServer({ name: id, toml, ...(repo === 'shared' ? { env: sharedEnv } : {}) }, ports[i]),
        );
      }
      gateway = await startGatewayProcess({ scheduler_addr: sched.grpcAddress }, KEY);
      process.env.E2B_API_URL = gateway.url;
      process.env.E2B_SANDBOX_URL = gateway.url;
      process.env.E2B_API_KEY = KEY;
      ctx = mkdtempSync(join(tmpdir(), 'cl-tmpl-ctx-'));
      writeFileSync(join(ctx, 'hello.txt'), `hello ${NAME}\n`);
    });
    afterAll(async () => {
      for (const s of sandboxes) await s.kill().catch(() => {});
      await gateway?.stop();
      rpc?.close();
      await sched?.stop();
      if (ctx) rmSync(ctx, { recursive: true, force: true });
      rmSync(shared, { recursive: true, force: true });
    });

    it('builds a template through the gateway (files uploaded), lists it once, and every create from it runs', async () => {
      const t = Template({ fileContextPath: ctx })
        .fromImage(BASE)
        .copy('hello.txt', '/srv/')
        .runCmd(`echo ${NAME} > /tmp/marker`);
      const built = await Template.build(t, NAME, { cpuCount: 1, memoryMB: 512 });
      expect(await Template.exists(NAME)).toBe(true);
      const listed = (await (await gw('/templates')).json()) as { templateID: string; aliases: string[] }[];
      expect(listed.filter((x) => x.aliases.includes(NAME)).map((x) => x.templateID)).toEqual([
        built.templateId,
      ]);
      // Round robin would put every other create on the node without the template; shared, both have it.
      for (let i = 0; i < 3; i++) sandboxes.push(await Sandbox.create(NAME, { timeoutMs: 300_000 }));
      const placed = new Set(await Promise.all(sandboxes.map((s) => boundNode(s.sandboxId))));
      expect(placed.size).toBe(repo === 'local' ? 1 : 2);
      for (const s of sandboxes) {
        expect((await s.commands.run('cat /tmp/marker /srv/hello.txt')).stdout).toBe(
          `${NAME}\nhello ${NAME}\n`,
        );
      }
      const teams = (await (await gw('/teams')).json()) as unknown[];
      expect(teams).toHaveLength(1);
      const metrics = await gw(
        `/sandboxes/metrics?sandbox_ids=${sandboxes.map((s) => s.sandboxId).join(',')}`,
      );
      expect(metrics.status).toBe(200);
      for (const id of Object.keys(((await metrics.json()) as { sandboxes: object }).sandboxes))
        expect(sandboxes.map((s) => s.sandboxId)).toContain(id);
    });

    it('lists a snapshot made on one node and launches it through the gateway (on that node unless shared) with its policy, then deletes it', async () => {
      const source = sandboxes[0]!;
      const node = await boundNode(source.sandboxId);
      await source.commands.run('echo snap > /tmp/snap.txt');
      // The snapshot records the policy it was taken with (in its signed commit marker in the repository).
      const policy = { allowOut: ['198.51.100.7/32'], denyOut: ['0.0.0.0/0'] };
      await source.updateNetwork(policy);
      const snap = await source.createSnapshot();
      await source.updateNetwork({});
      const paginator = Sandbox.listSnapshots();
      const ids: string[] = [];
      while (paginator.hasNext) ids.push(...(await paginator.nextItems()).map((x) => x.snapshotId));
      expect(ids).toContain(snap.snapshotId);
      const launchedOn = new Set<string>();
      for (let i = 0; i < 2; i++) {
        const s = await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000 });
        sandboxes.push(s);
        launchedOn.add(await boundNode(s.sandboxId));
        expect((await s.commands.run('cat /tmp/snap.txt')).stdout).toBe('snap\n');
        // Created without a network: it has the snapshot's policy, on whichever node it landed.
        expect((await s.getInfo()).network).toMatchObject(policy);
      }
      expect([...launchedOn]).toEqual(repo === 'local' ? [node] : expect.arrayContaining(NODES));
      for (const s of sandboxes.splice(3)) await s.kill();
      expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(true);
      expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(false);
    });

    it('deletes the template through the gateway once no sandbox uses it; the nodes leave nothing behind', async () => {
      const refused = await gw(`/templates/${NAME}`, { method: 'DELETE' });
      expect(refused.status).toBe(409);
      for (const s of sandboxes.splice(0)) await s.kill();
      expect((await gw(`/templates/${NAME}`, { method: 'DELETE' })).status).toBe(204);
      expect((await gw(`/templates/${NAME}`)).status).toBe(404);
      expect(await Template.exists(NAME)).toBe(false);
      for (const n of nodes) expect(await endNode(n)).toEqual({ stray: [], exitCode: 0 });
    });
  },
);
