// `Idempotency-Key` on sandbox creates and `requireHealthyGuest` on pause. The Python SDK (2.63; the JS SDK 2.51
// sends neither) drives both: concurrent creates with one `idempotency_key`, the key with another request, and
// `pause(strict=True)` while the sandbox's envd is stopped. Raw HTTP covers what the SDK cannot send: bad keys, a
// key on fork, 20 concurrent creates, a key from before a restart, from another team (the API key changed) and
// from before a crash in the middle of its create.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { randomUUID } from 'node:crypto';
import { ENVD_PORT, endNode, envdPids, proxyFetch, startServer, type TestServer } from './harness.js';

const NAME = 'aidem1';
const PYTHON = process.env.AENV_TEST_PYTHON ?? '/var/lib/aenv-test/pyvenv/bin/python';
/** Bound on one Python SDK script; it is killed after that. */
const PYTHON_LIMIT_MS = 120_000;

/** Runs `script` with the Python SDK pointed at `server`; resolves to the JSON its last stdout line prints. */
function python<T>(server: TestServer, script: string, args: string[] = []): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, ['-c', script, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        PYTHONDONTWRITEBYTECODE: '1',
        E2B_API_URL: server.url,
        E2B_SANDBOX_URL: server.url,
        E2B_API_KEY: server.apiKey,
      },
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const limit = setTimeout(() => child.kill('SIGKILL'), PYTHON_LIMIT_MS);
    child.on('exit', (code, signal) => {
      clearTimeout(limit);
      const last = out.trim().split('\n').pop() ?? '';
      if (code !== 0) return reject(new Error(`python exited ${code ?? signal}:\n${out}`));
      try {
        resolve(JSON.parse(last) as T);
      } catch {
        reject(new Error(`python printed no JSON:\n${out}`));
      }
    });
  });
}

/** Four threads create with one key (the same request); then the key with another timeout. */
const SDK_CREATES = `
import json, sys, threading
from e2b import Sandbox
key, tag = sys.argv[1], sys.argv[2]
made, errors = [], []
def create(timeout=300):
    return Sandbox.create("base", timeout=timeout, metadata={"tag": tag}, idempotency_key=key)
def worker():
    try:
        made.append(create())
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
out = {"ids": [s.sandbox_id for s in made], "errors": errors}
# Each answer is usable on its own: the replayed ones carry the same envd access token.
out["echo"] = [s.commands.run("echo hi").stdout for s in made]
try:
    create(timeout=301)
    out["other"] = None
except Exception as e:
    out["other"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
`;

/** `pause(strict=True)` without the SDK's retries of a 503. */
const SDK_STRICT_PAUSE = `
import json, sys
from e2b import Sandbox
try:
    print(json.dumps({"paused": Sandbox.pause(sys.argv[1], strict=True, retries=0)}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
`;

interface Answer {
  status: number;
  headers: Headers;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
}

async function keyed(server: TestServer, path: string, body: unknown, key?: string): Promise<Answer> {
  const r = await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: {
      'x-api-key': server.apiKey,
      'content-type': 'application/json',
      ...(key !== undefined ? { 'idempotency-key': key } : {}),
    },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, headers: r.headers, body: text ? JSON.parse(text) : undefined };
}

/** A create written byte for byte, so repeated headers and non-ASCII bytes reach the server as sent. */
function rawCreate(server: TestServer, headerLines: string[]): Promise<{ status: number; body: string }> {
  const body = JSON.stringify({ templateID: 'base' });
  return new Promise((resolve, reject) => {
    const sock = connect(server.port, '127.0.0.1');
    const chunks: Buffer[] = [];
    sock.on('data', (c) => chunks.push(c));
    sock.on('error', reject);
    sock.on('end', () => {
      const [head, ...rest] = Buffer.concat(chunks).toString('latin1').split('\r\n\r\n');
      resolve({ status: Number(head!.split(' ')[1]), body: rest.join('\r\n\r\n') });
    });
    const head = [
      'POST /v2/sandboxes HTTP/1.1',
      `Host: 127.0.0.1:${server.port}`,
      `x-api-key: ${server.apiKey}`,
      'content-type: application/json',
      `content-length: ${Buffer.byteLength(body)}`,
      'connection: close',
      ...headerLines,
    ];
    sock.write(Buffer.from(`${head.join('\r\n')}\r\n\r\n${body}`, 'latin1'));
  });
}

describe('Idempotency-Key on create and requireHealthyGuest on pause', () => {
  let server: TestServer;
  const run = randomUUID().slice(0, 8);
  /** How many sandboxes carry the metadata `tag=<tag>`. */
  const tagged = async (tag: string) => {
    const r = await server.api('GET', `/v2/sandboxes?metadata=${encodeURIComponent(`tag=${tag}`)}`);
    expect(r.status).toBe(200);
    return (r.body as { sandboxID: string }[]).map((s) => s.sandboxID);
  };
  const create = (tag: string) => ({ templateID: 'base', timeout: 300, metadata: { tag } });

  beforeAll(async () => {
    server = await startServer({ name: NAME });
  });
  afterAll(async () => {
    if (server) expect(await endNode(server)).toEqual({ stray: [], exitCode: 0 });
  });

  it('refuses bad keys and a key on fork with a 400 naming the header, creating nothing', async () => {
    const tag = `bad-${run}`;
    const long = await keyed(server, '/v2/sandboxes', create(tag), 'k'.repeat(256));
    expect(long.status).toBe(400);
    expect(long.body).toEqual({ code: 400, message: 'Idempotency-Key must be 1-255 characters (got 256)' });
    for (const lines of [
      ['Idempotency-Key: cl\u00e9'],
      [`Idempotency-Key: ${Buffer.from('ключ-1').toString('latin1')}`],
      ['Idempotency-Key: has space'],
    ]) {
      const r = await rawCreate(server, lines);
      expect(r.status, lines[0]).toBe(400);
      expect(JSON.parse(r.body).message).toContain('Idempotency-Key must be visible ASCII');
    }
    const twice = await rawCreate(server, ['Idempotency-Key: dup-1', 'idempotency-key: dup-1']);
    expect(twice.status).toBe(400);
    expect(JSON.parse(twice.body)).toEqual({
      code: 400,
      message: 'Idempotency-Key is given 2 times; send it once',
    });
    const fork = await keyed(server, `/sandboxes/${randomUUID()}/fork`, {}, 'fork-1');
    expect(fork.status).toBe(400);
    expect(fork.body.message).toContain('Idempotency-Key is not supported');
    expect(await tagged(tag)).toEqual([]);
  });

  it('20 concurrent creates with one key start one sandbox; the key with another body is a 422', async () => {
    const tag = `many-${run}`;
    const key = `many-${run}`;
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => keyed(server, '/v2/sandboxes', create(tag), key)),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(201));
    const ids = new Set(answers.map((a) => a.body.sandboxID));
    expect(ids.size).toBe(1);
    expect(answers.filter((a) => a.headers.get('idempotent-replayed') === 'true')).toHaveLength(19);
    // Every answer is the first one, envd token included: the SDK can use whichever it got.
    for (const a of answers) expect(a.body).toEqual(answers[0]!.body);
    expect(await tagged(tag)).toEqual([...ids]);

    const other = await keyed(server, '/v2/sandboxes', { ...create(tag), timeout: 301 }, key);
    expect(other.status).toBe(422);
    expect(other.body.message).toContain('Idempotency-Key was already used with a different request');
    const onV1 = await keyed(server, '/sandboxes', create(tag), key);
    expect(onV1.status).toBe(422);
    // The v1 route keeps its answers too.
    const v1 = await keyed(server, '/sandboxes', create(`v1-${run}`), `v1-${run}`);
    const v1Again = await keyed(server, '/sandboxes', create(`v1-${run}`), `v1-${run}`);
    expect([v1.status, v1Again.status]).toEqual([201, 201]);
    expect(v1Again.body).toEqual(v1.body);
    expect(await tagged(`v1-${run}`)).toEqual([v1.body.sandboxID]);
  });

  it('the Python SDK: four threads creating with one idempotency_key get one working sandbox; another request with it raises', async () => {
    const tag = `sdk-${run}`;
    const r = await python<{ ids: string[]; errors: string[]; echo: string[]; other: string | null }>(
      server,
      SDK_CREATES,
      [`sdk-${run}`, tag],
    );
    expect(r.errors).toEqual([]);
    expect(r.ids).toHaveLength(4);
    expect(new Set(r.ids).size).toBe(1);
    expect(r.echo).toEqual(Array(4).fill('hi\n'));
    expect(r.other).toMatch(
      /^SandboxException: 422: Idempotency-Key was already used with a different request/,
    );
    expect(await tagged(tag)).toEqual([r.ids[0]]);
  });

  it('a failed create is not kept: the retry with the key runs again', async () => {
    const key = `fail-${run}`;
    const missing = await keyed(server, '/v2/sandboxes', { templateID: 'no-such-template' }, key);
    expect(missing.status).toBe(404);
    // Same key, same request: runs again (and fails the same way); nothing was kept or created.
    const again = await keyed(server, '/v2/sandboxes', { templateID: 'no-such-template' }, key);
    expect(again.status).toBe(404);
    expect(again.headers.get('idempotent-replayed')).toBeNull();
  });

  it('answers keys from before a restart and from before a crash in the middle of their create', async () => {
    await server.killAll(); // (a graceful stop pauses what runs: only what this test needs)
    const kept = `kept-${run}`;
    const first = await keyed(server, '/v2/sandboxes', create(kept), kept);
    expect(first.status).toBe(201);
    expect(await server.stop()).toBe(0);

    // Another team (the node restarted with another API key) sending the key sees nothing of the first team's
    // request: its other body is no 422 and starts a sandbox of its own; the first team's body then is a 422
    // against its own request, not a replay of the first team's answer (whose envd access token it would hold).
    const otherKey = `e2b_${randomUUID().replace(/-/g, '')}${randomUUID().replace(/-/g, '').slice(0, 8)}`;
    const other = await startServer({ name: NAME, env: { AENV_API_KEY: otherKey } }, server.port);
    const theirs = { ...other, apiKey: otherKey };
    const otherBody = await keyed(theirs, '/v2/sandboxes', { ...create(kept), timeout: 301 }, kept);
    expect(otherBody.status).toBe(201);
    expect(otherBody.headers.get('idempotent-replayed')).toBeNull();
    expect(otherBody.body.sandboxID).not.toBe(first.body.sandboxID);
    const firstBody = await keyed(theirs, '/v2/sandboxes', create(kept), kept);
    expect(firstBody.status).toBe(422);
    expect(JSON.stringify(firstBody.body)).not.toContain(first.body.sandboxID);
    const killed = await fetch(`${other.url}/sandboxes/${otherBody.body.sandboxID}`, {
      method: 'DELETE',
      headers: { 'x-api-key': otherKey },
    });
    expect(killed.status).toBe(204);
    expect(await other.stop()).toBe(0);

    // A crash after the sandbox started, before its answer was kept: the retry must not start another.
    const late = `late-${run}`;
    let s = await startServer(
      { name: NAME, env: { AENV_FAULT_CRASH_AT: 'idempotency:answering' } },
      server.port,
    );
    await expect(keyed(s, '/v2/sandboxes', create(late), late)).rejects.toThrow();
    await s.crash();
    // A crash after the key was written, before the create began: the retry creates.
    const early = `early-${run}`;
    s = await startServer({ name: NAME, env: { AENV_FAULT_CRASH_AT: 'idempotency:recorded' } }, server.port);
    await expect(keyed(s, '/v2/sandboxes', create(early), early)).rejects.toThrow();
    await s.crash();

    server = await startServer({ name: NAME }, server.port);
    const replay = await keyed(server, '/v2/sandboxes', create(kept), kept);
    expect(replay.status).toBe(201);
    expect(replay.body).toEqual(first.body);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await tagged(kept)).toEqual([first.body.sandboxID]);

    const [lateSandbox, ...more] = await tagged(late);
    expect(more).toEqual([]);
    const lateRetry = await keyed(server, '/v2/sandboxes', create(late), late);
    expect(lateRetry.status).toBe(409);
    expect(lateRetry.body.message).toContain(`started sandbox ${lateSandbox}`);
    expect(await tagged(late)).toEqual([lateSandbox]);
    expect((await server.api('GET', `/sandboxes/${lateSandbox}`)).body.state).toBe('running');

    expect(await tagged(early)).toEqual([]);
    const earlyRetry = await keyed(server, '/v2/sandboxes', create(early), early);
    expect(earlyRetry.status).toBe(201);
    expect(await tagged(early)).toEqual([earlyRetry.body.sandboxID]);
  });

  it('pause(strict=True) and memory: false are refused (503) while envd is stopped, leaving the sandbox running', async () => {
    const made = await keyed(server, '/v2/sandboxes', create(`guest-${run}`));
    expect(made.status).toBe(201);
    const id: string = made.body.sandboxID;
    const pause = (body: unknown) => server.api('POST', `/sandboxes/${id}/pause`, body);
    const wrong = await pause({ requireHealthyGuest: 'yes' });
    expect(wrong.status).toBe(400);
    expect(wrong.body.message).toContain('requireHealthyGuest');

    const pids = envdPids(id);
    expect(pids.length).toBeGreaterThan(0);
    for (const pid of pids) process.kill(pid, 'SIGSTOP');
    let refused;
    let filesystemOnly;
    try {
      refused = await python<{ error?: string }>(server, SDK_STRICT_PAUSE, [id]);
      filesystemOnly = await pause({ memory: false });
    } finally {
      for (const pid of pids) process.kill(pid, 'SIGCONT');
    }
    expect(refused.error).toMatch(/^ServiceBusyException: 503: .*requireHealthyGuest: .*keeps running/);
    // A filesystem-only pause is refused the same way without the field (as the SDK documents).
    expect(filesystemOnly.status).toBe(503);
    expect(filesystemOnly.body.message).toContain('a filesystem-only pause (memory: false)');
    expect((await server.api('GET', `/sandboxes/${id}`)).body.state).toBe('running');
    // Its envd serves again (the same processes: nothing was restarted or frozen).
    expect(envdPids(id)).toEqual(pids);
    const health = await proxyFetch(server, id, ENVD_PORT, '/health', {
      headers: { 'x-access-token': made.body.envdAccessToken },
    });
    expect(health.status).toBe(204);

    expect(await python(server, SDK_STRICT_PAUSE, [id])).toEqual({ paused: true });
    expect((await server.api('GET', `/sandboxes/${id}`)).body.state).toBe('paused');
    const back = await server.api('POST', `/v2/sandboxes/${id}/connect`, { timeout: 60 });
    expect(back.status).toBe(201);
  });
});
