// One API caller must not fill the host disk with paused sandboxes (docs/security.md, "Starving the others or the
// host"): a real node with a tiny `[orchestrator].paused_quota_mb`, sandboxes driven by the real e2b SDK that
// write a few MiB each and pause to disk until the quota refuses; a delete makes room; a restart keeps the count;
// a node with `paused_retention_secs` deletes paused sandboxes past it, disk and all.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, SandboxError } from 'e2b';
import { endNode, eventually, startServer, storeDir, useSdk, type TestServer } from '../e2e/harness.js';
import { expectErrorShape } from './lib.js';

const NAME = 'squota';
const QUOTA_MB = 8;
// Each sandbox's disk takes a bit more than this once paused (its upper holds envd's own few files too).
const BLOB_MB = 3;

const config = (retentionSecs: number) =>
  `[orchestrator]\npaused_quota_mb = ${QUOTA_MB}\npaused_retention_secs = ${retentionSecs}\n`;

describe('paused sandboxes stay under the node quota and retention', () => {
  let server: TestServer;

  const start = async (retentionSecs: number, port?: number) => {
    server = await startServer({ name: NAME, toml: config(retentionSecs) }, port);
    useSdk(server);
  };
  const withBlob = async () => {
    const sbx = await Sandbox.create({ timeoutMs: 600_000 });
    const r = await sbx.commands.run(
      `head -c ${BLOB_MB * 1024 * 1024} /dev/urandom > /home/user/blob && sync`,
    );
    expect(r.exitCode).toBe(0);
    return sbx;
  };
  const state = async (id: string) => {
    const r = await server.api('GET', `/sandboxes/${id}`);
    return r.status === 404 ? 'gone' : (r.body as { state: string }).state;
  };
  const pausedDir = (id: string) => join(storeDir(server), 'paused', id);

  beforeAll(async () => {
    await start(0);
  });
  afterAll(async () => {
    if (server) expect(await endNode(server)).toEqual({ stray: [], exitCode: 0 });
  });

  let paused: Sandbox[] = [];
  let refused: Sandbox;

  it('pauses until the quota refuses with 507 naming it; the refused sandbox runs on, nothing of it is kept', async () => {
    const made: Sandbox[] = [];
    let refusal: unknown;
    for (let i = 0; i < 6 && refusal === undefined; i++) {
      const sbx = await withBlob();
      made.push(sbx);
      refusal = await sbx.pause({ keepMemory: false }).then(
        () => undefined,
        (e: unknown) => e,
      );
    }
    expect(refusal, 'a pause was refused within 6').toBeInstanceOf(SandboxError);
    expect((refusal as SandboxError & { statusCode?: number }).statusCode).toBe(507);
    expect(String((refusal as Error).message)).toContain('orchestrator.paused_quota_mb');
    refused = made.pop()!;
    paused = made;
    // 8 MiB hold two sandboxes of 3 MiB, not three.
    expect(paused).toHaveLength(2);
    for (const p of paused) expect(await state(p.sandboxId)).toBe('paused');

    // The documented error shape, raw: and asking again changes nothing.
    const raw = await fetch(`${server.url}/sandboxes/${refused.sandboxId}/pause`, {
      method: 'POST',
      headers: { 'x-api-key': server.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ memory: false }),
    });
    expectErrorShape(
      { status: raw.status, headers: Object.fromEntries(raw.headers), body: await raw.text() },
      507,
    );
    expect(await state(refused.sandboxId)).toBe('running');
    expect(existsSync(pausedDir(refused.sandboxId))).toBe(false);
    const blob = await refused.commands.run('stat -c %s /home/user/blob');
    expect(blob.stdout.trim()).toBe(String(BLOB_MB * 1024 * 1024));
  });

  it('a deleted paused sandbox makes room: the same pause then succeeds', async () => {
    const gone = paused.shift()!;
    await gone.kill();
    expect(existsSync(join(pausedDir(gone.sandboxId), 'complete'))).toBe(false);
    expect(await refused.pause({ keepMemory: false })).toBe(true);
    expect(await state(refused.sandboxId)).toBe('paused');
    paused.push(refused);
  });

  it('a restart keeps the count: the quota still refuses the next pause', async () => {
    expect(await server.stop()).toBe(0);
    await start(0, server.port);
    for (const p of paused) expect(await state(p.sandboxId)).toBe('paused');
    const next = await withBlob();
    await expect(next.pause({ keepMemory: false })).rejects.toThrow(/paused_quota_mb/);
    expect(await state(next.sandboxId)).toBe('running');
    await next.kill();
  });

  it('paused_retention_secs deletes paused sandboxes past it, record and disk, as DELETE does', async () => {
    expect(await server.stop()).toBe(0);
    await start(3, server.port);
    // Paused before the restart, longer ago than 3 s: deleted by the first ticks.
    for (const p of paused) {
      await eventually(
        async () => (await state(p.sandboxId)) === 'gone',
        `${p.sandboxId} to expire`,
        300,
        100,
      );
      expect(existsSync(pausedDir(p.sandboxId))).toBe(false);
    }
    expect(server.logs()).toContain('paused sandbox deleted: retention expired');
    // Room again; and a pause taken now expires too.
    const fresh = await withBlob();
    expect(await fresh.pause({ keepMemory: false })).toBe(true);
    expect(existsSync(join(pausedDir(fresh.sandboxId), 'complete'))).toBe(true);
    await eventually(
      async () => (await state(fresh.sandboxId)) === 'gone',
      'the new pause to expire',
      300,
      100,
    );
    expect(existsSync(pausedDir(fresh.sandboxId))).toBe(false);
    // Its logs (kept after it is gone) say why.
    const logs = await server.api('GET', `/v2/sandboxes/${fresh.sandboxId}/logs`);
    expect(logs.status).toBe(200);
    const events = (logs.body as { logs: { message: string }[] }).logs.map((l) => l.message);
    expect(events.some((m) => m.includes('paused_retention_secs'))).toBe(true);
  });
});
