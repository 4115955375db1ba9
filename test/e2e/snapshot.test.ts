// Snapshots of running sandboxes through the real e2b SDK (and the raw API where the SDK has no call): create with
// and without a name, list with filters and pages, get by id and name, launch, alias rules, delete.
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  ENVD_PORT,
  counterPasses,
  proxyFetch,
  readWorkload,
  startWorkload,
  workloadFetch,
  type Workload,
} from './harness.js';
import { parseServerTiming } from '../../packages/node/src/util/phases.js';
import { describeNode } from './fixture.js';

describe('snapshots through the e2b SDK', () => {
  const { server } = describeNode({ name: 'snaps' });
  let source: Sandbox;
  let w: Workload;
  let sourceEndAt: string;
  // Created in order by the first test: `unnamed`, then `named` (bound to `alias`).
  let unnamed: { snapshotId: string; names: string[] };
  let named: { snapshotId: string; names: string[] };
  const alias = `snap-${randomUUID().slice(0, 8)}`;
  const launched: Sandbox[] = [];

  const info = async (id: string) => (await server.api('GET', `/sandboxes/${id}`)).body;
  const ids = (body: { snapshotID: string }[]) => body.map((s) => s.snapshotID);
  const launch = async (templateId: string, envs?: Record<string, string>) => {
    const sbx = await Sandbox.create(templateId, { timeoutMs: 300_000, ...(envs ? { envs } : {}) });
    launched.push(sbx);
    return sbx;
  };

  beforeAll(async () => {
    source = await Sandbox.create({ timeoutMs: 600_000, envs: { FROM_CREATE: 'source-env' } });
    w = await startWorkload(server, source);
    await source.files.write('notes/at-snapshot.txt', 'before the snapshot');
    sourceEndAt = (await info(source.sandboxId)).endAt;
  });

  it('creates snapshots with and without a name; the source keeps running with its expiry', async () => {
    const counterBefore = (await readWorkload(source, w)).counter;
    unnamed = await source.createSnapshot();
    expect(unnamed.snapshotId).toMatch(/^[0-9a-f-]{36}$/);
    expect(unnamed.names).toEqual([]);
    named = await Sandbox.createSnapshot(source.sandboxId, { name: alias });
    expect(named.names).toEqual([alias]);
    expect(named.snapshotId).not.toBe(unnamed.snapshotId);

    const after = await info(source.sandboxId);
    expect(after).toMatchObject({ state: 'running', endAt: sourceEndAt });
    const view = await readWorkload(source, w);
    expect(view).toMatchObject({ counterAlive: true, serverAlive: true, file: w.file });
    expect(view.counter).toBeGreaterThanOrEqual(counterBefore);
    await counterPasses(source, w, view.counter);
    expect(await workloadFetch(server, source.sandboxId, '/secret')).toEqual({ status: 200, body: w.secret });
  });

  it('gets a snapshot by id and by name; unknown ones are 404', async () => {
    const byId = await server.api('GET', `/snapshots/${unnamed.snapshotId}`);
    expect(byId.status).toBe(200);
    expect(byId.body).toMatchObject({ snapshotID: unnamed.snapshotId, names: [] });
    expect(byId.body.cpuCount).toBeGreaterThan(0);
    expect(byId.body.memoryMB).toBeGreaterThan(0);
    const byName = await server.api('GET', `/snapshots/${alias}`);
    expect(byName.status).toBe(200);
    expect(byName.body).toMatchObject({ snapshotID: named.snapshotId, names: [alias] });
    expect((await server.api('GET', `/snapshots/${randomUUID()}`)).status).toBe(404);
    expect((await server.api('GET', '/snapshots/no-such-snapshot')).status).toBe(404);
    // The base template is a template, not a snapshot.
    expect((await server.api('GET', '/snapshots/base')).status).toBe(404);
  });

  it('says in Server-Timing how long the sandbox was held (capture) and how long publishing took', async () => {
    const r = await server.api('POST', `/sandboxes/${source.sandboxId}/snapshots`, {});
    expect(r.status).toBe(201);
    const header = r.headers.get('server-timing') ?? '';
    const phases = parseServerTiming(header);
    expect(
      phases.map((p) => p.name),
      header || 'no Server-Timing header',
    ).toEqual(expect.arrayContaining(['capture', 'publish', 'total']));
    expect(phases.find((p) => p.name === 'capture')!.ms).toBeGreaterThan(0);
    expect(phases.find((p) => p.name === 'publish')!.ms).toBeGreaterThan(0);
    expect((await info(source.sandboxId)).state).toBe('running');
    expect((await server.api('DELETE', `/templates/${r.body.snapshotID}`)).status).toBe(204);
  });

  it('lists snapshots with sandboxID and name filters and in pages (newest first)', async () => {
    const bySource = await server.api('GET', `/snapshots?sandboxID=${source.sandboxId}`);
    expect(bySource.status).toBe(200);
    expect(ids(bySource.body)).toEqual([named.snapshotId, unnamed.snapshotId]);
    expect(ids((await server.api('GET', `/snapshots?sandboxID=${randomUUID()}`)).body)).toEqual([]);
    expect(ids((await server.api('GET', `/snapshots?name=${alias}`)).body)).toEqual([named.snapshotId]);
    // `namespace/` and `:tag` are stripped from the name filter.
    expect(ids((await server.api('GET', `/snapshots?name=team/${alias}:default`)).body)).toEqual([
      named.snapshotId,
    ]);
    expect(ids((await server.api('GET', `/snapshots?name=${unnamed.snapshotId}`)).body)).toEqual([
      unnamed.snapshotId,
    ]);

    const first = await server.api('GET', `/snapshots?sandboxID=${source.sandboxId}&limit=1`);
    expect(ids(first.body)).toEqual([named.snapshotId]);
    const token = first.headers.get('x-next-token');
    expect(token).toBeTruthy();
    const second = await server.api(
      'GET',
      `/snapshots?sandboxID=${source.sandboxId}&limit=1&nextToken=${encodeURIComponent(token!)}`,
    );
    expect(ids(second.body)).toEqual([unnamed.snapshotId]);
    expect(second.headers.get('x-next-token')).toBeNull();
    expect((await server.api('GET', '/snapshots?nextToken=garbage')).status).toBe(400);
    expect((await server.api('GET', '/snapshots?limit=0')).status).toBe(400);

    const pages = Sandbox.listSnapshots({ sandboxId: source.sandboxId, limit: 1 });
    const seen: string[] = [];
    for (let i = 0; i < 5 && pages.hasNext; i++)
      seen.push(...(await pages.nextItems()).map((s) => s.snapshotId));
    expect(seen).toEqual([named.snapshotId, unnamed.snapshotId]);
    expect((await source.listSnapshots().nextItems()).map((s) => s.names)).toEqual([[alias], []]);
  });

  it('launches two sandboxes from one snapshot: both have the files and the running process, and diverge', async () => {
    const a = await launch(named.snapshotId, { FROM_CREATE: 'a-env' });
    const b = await launch(alias);
    for (const sbx of [a, b]) {
      expect(sbx.sandboxId).not.toBe(source.sandboxId);
      const detail = await info(sbx.sandboxId);
      expect(detail).toMatchObject({ state: 'running', templateID: named.snapshotId });
      // The process captured in the snapshot runs here too, under the same PID, and holds the same memory.
      const view = await readWorkload(sbx, w);
      expect(view).toMatchObject({ counterAlive: true, serverAlive: true, file: w.file });
      await counterPasses(sbx, w, view.counter);
      expect(await workloadFetch(server, sbx.sandboxId, '/secret')).toEqual({ status: 200, body: w.secret });
      expect(await sbx.files.read('notes/at-snapshot.txt')).toBe('before the snapshot');
      expect((await sbx.commands.run('hostname')).stdout.trim()).toBe(sbx.sandboxId);
    }
    expect((await a.commands.run('echo "$FROM_CREATE"')).stdout).toBe('a-env\n');

    // Diverge: files and processes of one are not the other's, nor the source's.
    await a.files.write('notes/only-a.txt', 'A');
    await b.files.write('notes/only-b.txt', 'B');
    await a.commands.run(`kill ${w.counterPid}`);
    expect(await b.files.exists('notes/only-a.txt')).toBe(false);
    expect(await a.files.exists('notes/only-b.txt')).toBe(false);
    expect(await source.files.exists('notes/only-a.txt')).toBe(false);
    expect((await readWorkload(a, w)).counterAlive).toBe(false);
    const bView = await readWorkload(b, w);
    expect(bView.counterAlive).toBe(true);
    await counterPasses(b, w, bView.counter);
    expect((await readWorkload(source, w)).counterAlive).toBe(true);
  });

  it('refuses a taken name and invalid names with 400, unknown sandboxes with 404', async () => {
    const taken = await server.api('POST', `/sandboxes/${source.sandboxId}/snapshots`, { name: alias });
    expect(taken.status).toBe(400);
    expect(taken.body.code).toBe(400);
    for (const bad of ['bad/name', 'has.dot', 'has space', 'colon:tag', '']) {
      const r = await server.api('POST', `/sandboxes/${source.sandboxId}/snapshots`, { name: bad });
      expect(r.status, `name ${JSON.stringify(bad)}`).toBe(400);
    }
    await expect(Sandbox.createSnapshot(source.sandboxId, { name: 'bad/name' })).rejects.toThrow(/400/);
    expect((await server.api('POST', `/sandboxes/${randomUUID()}/snapshots`, {})).status).toBe(404);
    // None of the refused requests left a snapshot behind.
    expect(ids((await server.api('GET', `/snapshots?sandboxID=${source.sandboxId}`)).body)).toEqual([
      named.snapshotId,
      unnamed.snapshotId,
    ]);
    expect((await info(source.sandboxId)).state).toBe('running');
  });

  it('refuses to delete a snapshot that sandboxes on this node were started from (documented 409)', async () => {
    const child = await launch(unnamed.snapshotId);
    const refused = await server.api('DELETE', `/templates/${unnamed.snapshotId}`);
    expect(refused.status).toBe(409);
    expect(refused.body.message).toMatch(/used by 1 sandbox/);
    // Also while that sandbox is paused: it may need the snapshot to resume.
    await child.pause();
    expect((await server.api('DELETE', `/templates/${unnamed.snapshotId}`)).status).toBe(409);
    expect((await server.api('GET', `/snapshots/${unnamed.snapshotId}`)).status).toBe(200);
    await child.connect();
    expect(await readWorkload(child, w)).toMatchObject({
      counterAlive: true,
      serverAlive: true,
      file: w.file,
    });
    expect(await child.kill()).toBe(true);
  });

  it('deletes a snapshot (once: then it is not found); launching it then is 404', async () => {
    expect(await Sandbox.deleteSnapshot(unnamed.snapshotId)).toBe(true);
    expect((await server.api('GET', `/snapshots/${unnamed.snapshotId}`)).status).toBe(404);
    expect(await Sandbox.deleteSnapshot(unnamed.snapshotId)).toBe(false);
    expect((await server.api('DELETE', `/templates/${unnamed.snapshotId}`)).status).toBe(404);
    const launchDeleted = await server.api('POST', '/sandboxes', { templateID: unnamed.snapshotId });
    expect(launchDeleted.status).toBe(404);
    await expect(Sandbox.create(unnamed.snapshotId)).rejects.toThrow(/404|not found/);
    expect(ids((await server.api('GET', `/snapshots?sandboxID=${source.sandboxId}`)).body)).toEqual([
      named.snapshotId,
    ]);
  });

  it('deleting by name frees the name for a new snapshot', async () => {
    const extra = await source.createSnapshot({ name: `${alias}-x` });
    expect((await server.api('DELETE', `/templates/${alias}-x`)).status).toBe(204);
    expect((await server.api('GET', `/snapshots/${extra.snapshotId}`)).status).toBe(404);
    expect((await server.api('POST', '/sandboxes', { templateID: `${alias}-x` })).status).toBe(404);
    const again = await source.createSnapshot({ name: `${alias}-x` });
    expect(again.snapshotId).not.toBe(extra.snapshotId);
    expect((await server.api('GET', `/snapshots/${alias}-x`)).body.snapshotID).toBe(again.snapshotId);
    expect(await Sandbox.deleteSnapshot(again.snapshotId)).toBe(true);
  });

  it('snapshots a sandbox that was launched from a snapshot (a chain keeps both layers of changes)', async () => {
    const first = await launch(alias);
    await first.files.write('notes/second.txt', 'second generation');
    const chained = await first.createSnapshot();
    const second = await launch(chained.snapshotId);
    expect(await second.files.read('notes/at-snapshot.txt')).toBe('before the snapshot');
    expect(await second.files.read('notes/second.txt')).toBe('second generation');
    const view = await readWorkload(second, w);
    expect(view).toMatchObject({ counterAlive: true, serverAlive: true, file: w.file });
    expect(await workloadFetch(server, second.sandboxId, '/secret')).toEqual({ status: 200, body: w.secret });
    expect(await second.kill()).toBe(true);
    expect(await Sandbox.deleteSnapshot(chained.snapshotId)).toBe(true);
  });

  it('a snapshot of a secure sandbox launches as a plain and as a secure sandbox with its own token', async () => {
    const raw = await server.api('POST', '/sandboxes', { templateID: 'base', secure: true, timeout: 300 });
    expect(raw.status).toBe(201);
    const src = await Sandbox.connect(raw.body.sandboxID);
    await src.files.write('secure.txt', 'from the secure source');
    const snap = await src.createSnapshot();
    const envdFile = (id: string, token: string | undefined) =>
      proxyFetch(server, id, ENVD_PORT, '/files?path=/home/user/secure.txt', {
        headers: token ? { 'X-Access-Token': token } : {},
      });

    // Plain: the v1 create without `secure` (every v2 sandbox, the SDK's, is secured).
    const plainRaw = await server.api('POST', '/sandboxes', { templateID: snap.snapshotId, timeout: 300 });
    expect(plainRaw.status).toBe(201);
    expect(plainRaw.body.envdAccessToken).toBeUndefined();
    const plain = await Sandbox.connect(plainRaw.body.sandboxID);
    expect(await plain.files.read('secure.txt')).toBe('from the secure source');
    expect((await envdFile(plain.sandboxId, undefined)).status).toBe(200);

    const secured = await server.api('POST', '/sandboxes', {
      templateID: snap.snapshotId,
      secure: true,
      timeout: 300,
    });
    expect(secured.status).toBe(201);
    const token = secured.body.envdAccessToken as string;
    expect(token).not.toBe(raw.body.envdAccessToken);
    expect((await envdFile(secured.body.sandboxID, token)).status).toBe(200);
    expect((await envdFile(secured.body.sandboxID, raw.body.envdAccessToken)).status).toBe(401);
    expect((await envdFile(secured.body.sandboxID, undefined)).status).toBe(401);
    const viaSdk = await Sandbox.connect(secured.body.sandboxID);
    expect((await viaSdk.commands.run('cat secure.txt; hostname')).stdout).toBe(
      `from the secure source${secured.body.sandboxID}\n`,
    );

    for (const id of [plain.sandboxId, secured.body.sandboxID, raw.body.sandboxID]) {
      expect((await server.api('DELETE', `/sandboxes/${id}`)).status).toBe(204);
    }
    expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(true);
  });

  it('still lists and launches the snapshot after the source is gone', async () => {
    const sourceId = source.sandboxId;
    expect(await source.kill()).toBe(true);
    expect((await server.api('GET', `/sandboxes/${sourceId}`)).status).toBe(404);
    const listed = await server.api('GET', `/snapshots?sandboxID=${sourceId}`);
    expect(ids(listed.body)).toEqual([named.snapshotId]);
    const sbx = await launch(alias);
    const view = await readWorkload(sbx, w);
    expect(view).toMatchObject({ counterAlive: true, serverAlive: true, file: w.file });
    expect(await workloadFetch(server, sbx.sandboxId, '/secret')).toEqual({ status: 200, body: w.secret });
    for (const l of launched.splice(0)) await l.kill();
    expect(await Sandbox.deleteSnapshot(alias)).toBe(true);
    expect((await server.api('GET', `/snapshots?sandboxID=${sourceId}`)).body).toEqual([]);
  });
});
