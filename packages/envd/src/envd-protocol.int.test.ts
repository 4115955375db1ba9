// envd's wire protocol below the SDK: raw Connect calls (binary and JSON codecs, HTTP/1.1 and h2c,
// client streaming), the REST edge cases, and access-token enforcement. envd runs on the host as root.
import http from 'node:http';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import {
  EventType,
  Filesystem,
  Process,
  Signal,
  StreamInputRequestSchema,
  type ProcessEvent,
  type StartResponse,
  type ConnectResponse,
} from '@aenv/protocol';
import { AuthenticationError, FileType } from 'e2b';
import { ENVD_UNAUTHORIZED_MESSAGE as UNAUTHORIZED_MESSAGE, fileSignature } from '@aenv/protocol/envd';
import { startHostEnvd, type RunningTestEnvd } from './testing/envd-process.js';
import { initEnvd, sdkSandbox } from './testing/sdk.js';
import { buildTestTools } from './testing/tools.js';

let deps: string;
let work: string;
let toolsDir: string;
let envd: RunningTestEnvd;

beforeAll(async () => {
  deps = mkdtempSync('/tmp/aenv-envd-proto-deps-');
  work = mkdtempSync('/tmp/aenv-envd-proto-work-');
  toolsDir = (await buildTestTools(deps)).dir;
  envd = await startHostEnvd(toolsDir);
  expect((await initEnvd(envd.url, { envVars: { FROM_INIT: '1' }, defaultWorkdir: work })).status).toBe(204);
});

afterAll(async () => {
  await envd?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
  if (deps) rmSync(deps, { recursive: true, force: true });
});

function clients(url: string, opts: { binary: boolean; http2?: boolean; token?: string }) {
  const transport = createConnectTransport({
    baseUrl: url,
    httpVersion: opts.http2 ? '2' : '1.1',
    useBinaryFormat: opts.binary,
    interceptors: opts.token
      ? [
          (next) => (req) => {
            req.header.set('x-access-token', opts.token!);
            return next(req);
          },
        ]
      : [],
  });
  return { process: createClient(Process, transport), fs: createClient(Filesystem, transport) };
}

async function collect(stream: AsyncIterable<StartResponse | ConnectResponse>): Promise<ProcessEvent[]> {
  const out: ProcessEvent[] = [];
  for await (const m of stream) if (m.event) out.push(m.event);
  return out;
}

function stdoutOf(events: ProcessEvent[]): string {
  return events
    .map((e) =>
      e.event.case === 'data' && e.event.value.output.case === 'stdout'
        ? Buffer.from(e.event.value.output.value).toString()
        : '',
    )
    .join('');
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function until(pred: () => boolean | Promise<boolean>, tries = 100): Promise<boolean> {
  for (let i = 0; i < tries; i++) {
    if (await pred()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return pred();
}

describe('Connect RPC', () => {
  for (const [name, opts] of [
    ['binary over HTTP/1.1', { binary: true }],
    ['JSON over h2c', { binary: false, http2: true }],
    ['binary over h2c', { binary: true, http2: true }],
  ] as const) {
    it(`starts a process and streams start, data and end events (${name})`, async () => {
      const { process: proc } = clients(envd.url, opts);
      const events = await collect(
        proc.start({
          process: { cmd: '/bin/sh', args: ['-c', 'echo "$FROM_INIT $X"; pwd; exit 2'], envs: { X: 'y' } },
          stdin: false,
        }),
      );
      expect(events[0]?.event.case).toBe('start');
      const pid = events[0]?.event.case === 'start' ? events[0].event.value.pid : 0;
      expect(pid).toBeGreaterThan(1);
      expect(stdoutOf(events)).toBe(`1 y\n${work}\n`);
      const end = events.at(-1);
      expect(end?.event.case).toBe('end');
      expect(end?.event.value).toMatchObject({
        exitCode: 2,
        exited: true,
        status: 'exit status 2',
        error: 'exit status 2',
      });
    });
  }

  it('splits output into chunks of at most 32 KiB', async () => {
    const { process: proc } = clients(envd.url, { binary: true });
    const events = await collect(
      proc.start({ process: { cmd: '/bin/sh', args: ['-c', 'head -c 300000 /dev/zero'] } }),
    );
    const sizes = events
      .filter((e) => e.event.case === 'data')
      .map((e) => (e.event.case === 'data' ? e.event.value.output.value!.length : 0));
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(300_000);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(32 * 1024);
  });

  it('splits PTY output into chunks of at most 16 KiB', async () => {
    const { process: proc } = clients(envd.url, { binary: true });
    const events = await collect(
      proc.start({
        process: { cmd: '/bin/sh', args: ['-c', 'head -c 100000 /dev/zero | tr "\\0" x'] },
        pty: { size: { cols: 80, rows: 24 } },
      }),
    );
    const sizes = events
      .filter((e) => e.event.case === 'data' && e.event.value.output.case === 'pty')
      .map((e) => (e.event.case === 'data' ? e.event.value.output.value!.length : 0));
    expect(sizes.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(100_000);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(16 * 1024);
  });

  it('lists processes with config and tag, connects by tag, and ends them with SIGTERM', async () => {
    const { process: proc } = clients(envd.url, { binary: false });
    const stream = proc.start(
      { process: { cmd: 'sleep', args: ['30'], envs: { A: 'b' }, cwd: '/tmp' }, tag: 'sleeper' },
      { timeoutMs: 0 },
    );
    const it = stream[Symbol.asyncIterator]();
    const first = (await it.next()).value as StartResponse;
    const pid = first.event?.event.case === 'start' ? first.event.event.value.pid : 0;
    const listed = (await proc.list({})).processes.find((p) => p.pid === pid);
    expect(listed).toMatchObject({
      tag: 'sleeper',
      config: { cmd: 'sleep', args: ['30'], envs: { A: 'b' }, cwd: '/tmp' },
    });

    const connected = proc.connect({ process: { selector: { case: 'tag', value: 'sleeper' } } });
    await proc.sendSignal({
      process: { selector: { case: 'tag', value: 'sleeper' } },
      signal: Signal.SIGTERM,
    });
    const viaConnect = await collect(connected);
    expect(viaConnect[0]?.event).toMatchObject({ case: 'start', value: { pid } });
    expect(viaConnect.at(-1)?.event.value).toMatchObject({
      exitCode: -1,
      exited: false,
      status: 'signal: terminated',
    });
    const rest: ProcessEvent[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) if (r.value.event) rest.push(r.value.event);
    expect(rest.at(-1)?.event.case).toBe('end');
  });

  it('rejects unknown pids and unsupported signals', async () => {
    const { process: proc } = clients(envd.url, { binary: true });
    const missing = await proc
      .sendSignal({ process: { selector: { case: 'pid', value: 999_999 } }, signal: Signal.SIGKILL })
      .catch((e: unknown) => e);
    expect(ConnectError.from(missing).code).toBe(Code.NotFound);
    expect(ConnectError.from(missing).rawMessage).toBe('process with pid 999999 not found');
    const stream = proc.start({ process: { cmd: 'sleep', args: ['10'] } });
    const it = stream[Symbol.asyncIterator]();
    const first = (await it.next()).value as StartResponse;
    const pid = first.event?.event.case === 'start' ? first.event.event.value.pid : 0;
    const bad = await proc
      .sendSignal({ process: { selector: { case: 'pid', value: pid } }, signal: Signal.UNSPECIFIED })
      .catch((e: unknown) => e);
    expect(ConnectError.from(bad).code).toBe(Code.Unimplemented);
    await proc.sendSignal({ process: { selector: { case: 'pid', value: pid } }, signal: Signal.SIGKILL });
    for (let r = await it.next(); !r.done; r = await it.next()) void r;
  });

  for (const http2 of [false, true]) {
    it(`takes stdin through client-streaming StreamInput (${http2 ? 'h2c' : 'HTTP/1.1'})`, async () => {
      const { process: proc } = clients(envd.url, { binary: true, http2 });
      const tag = `cat-${http2}`;
      const events = collect(proc.start({ process: { cmd: 'cat', args: [] }, tag, stdin: true }));
      await until(() => proc.list({}).then((l) => l.processes.some((p) => p.tag === tag)));
      async function* input() {
        yield create(StreamInputRequestSchema, {
          event: { case: 'start', value: { process: { selector: { case: 'tag', value: tag } } } },
        });
        for (const part of ['one ', 'two ', 'three\n']) {
          yield create(StreamInputRequestSchema, {
            event: { case: 'data', value: { input: { input: { case: 'stdin', value: Buffer.from(part) } } } },
          });
        }
        yield create(StreamInputRequestSchema, { event: { case: 'keepalive', value: {} } });
      }
      await proc.streamInput(input());
      await proc.closeStdin({ process: { selector: { case: 'tag', value: tag } } });
      expect(stdoutOf(await events)).toBe('one two three\n');
    });
  }

  it('opens a stdin pipe when stdin is unset (old SDKs) and /dev/null when false', async () => {
    const { process: proc } = clients(envd.url, { binary: false });
    const events = collect(proc.start({ process: { cmd: 'cat', args: [] }, tag: 'legacy' }));
    await until(() => proc.list({}).then((l) => l.processes.some((p) => p.tag === 'legacy')));
    await proc.sendInput({
      process: { selector: { case: 'tag', value: 'legacy' } },
      input: { input: { case: 'stdin', value: Buffer.from('piped\n') } },
    });
    await proc.closeStdin({ process: { selector: { case: 'tag', value: 'legacy' } } });
    expect(stdoutOf(await events)).toBe('piped\n');

    const noStdin = proc.start({ process: { cmd: 'sleep', args: ['5'] }, tag: 'nostdin', stdin: false });
    const it = noStdin[Symbol.asyncIterator]();
    await it.next();
    const err = await proc
      .sendInput({
        process: { selector: { case: 'tag', value: 'nostdin' } },
        input: { input: { case: 'stdin', value: Buffer.from('x') } },
      })
      .catch((e: unknown) => e);
    expect(ConnectError.from(err).code).toBe(Code.FailedPrecondition);
    await proc.sendSignal({
      process: { selector: { case: 'tag', value: 'nostdin' } },
      signal: Signal.SIGKILL,
    });
    for (let r = await it.next(); !r.done; r = await it.next()) void r;
  });

  it('sends keepalive events on idle streams at the requested interval', async () => {
    const { process: proc } = clients(envd.url, { binary: true });
    const events = await collect(
      proc.start(
        { process: { cmd: 'sleep', args: ['2.5'] } },
        { headers: { 'keepalive-ping-interval': '1' } },
      ),
    );
    expect(events.filter((e) => e.event.case === 'keepalive').length).toBeGreaterThanOrEqual(1);
    expect(events.at(-1)?.event.case).toBe('end');
  });

  it('kills a process when its Connect-Timeout-Ms passes, but not when the client goes away', async () => {
    const { process: proc } = clients(envd.url, { binary: true });
    let pid = 0;
    const err = await (async () => {
      for await (const m of proc.start({ process: { cmd: 'sleep', args: ['30'] } }, { timeoutMs: 800 })) {
        if (m.event?.event.case === 'start') pid = m.event.event.value.pid;
      }
    })().catch((e: unknown) => e);
    expect(ConnectError.from(err).code).toBe(Code.DeadlineExceeded);
    expect(await until(() => !alive(pid))).toBe(true);

    const abort = new AbortController();
    let survivor = 0;
    await (async () => {
      for await (const m of proc.start(
        { process: { cmd: 'sleep', args: ['30'] } },
        { signal: abort.signal, timeoutMs: 0 },
      )) {
        if (m.event?.event.case === 'start') {
          survivor = m.event.event.value.pid;
          abort.abort();
        }
      }
    })().catch(() => undefined);
    await new Promise((r) => setTimeout(r, 300));
    expect(alive(survivor)).toBe(true);
    await proc.sendSignal({
      process: { selector: { case: 'pid', value: survivor } },
      signal: Signal.SIGKILL,
    });
    expect(await until(() => !alive(survivor))).toBe(true);
  });

  it('polls watch events with CreateWatcher / GetWatcherEvents / RemoveWatcher', async () => {
    const { fs } = clients(envd.url, { binary: true });
    const dir = join(work, 'polled');
    mkdirSync(join(dir, 'sub'), { recursive: true });
    const { watcherId } = await fs.createWatcher({ path: dir, recursive: true, includeEntry: true });
    writeFileSync(join(dir, 'sub', 'f.txt'), 'x');
    const seen: { name: string; type: EventType; hasEntry: boolean }[] = [];
    await until(async () => {
      for (const e of (await fs.getWatcherEvents({ watcherId })).events)
        seen.push({ name: e.name, type: e.type, hasEntry: !!e.entry });
      return seen.some((e) => e.name === 'sub/f.txt' && e.type === EventType.WRITE);
    });
    expect(seen).toContainEqual({ name: 'sub/f.txt', type: EventType.CREATE, hasEntry: true });
    expect(seen).toContainEqual({ name: 'sub/f.txt', type: EventType.WRITE, hasEntry: true });
    await fs.removeWatcher({ watcherId });
    const gone = await fs.getWatcherEvents({ watcherId }).catch((e: unknown) => e);
    expect(ConnectError.from(gone).code).toBe(Code.NotFound);
  });

  it('answers unary JSON errors with the Connect error body', async () => {
    const res = await fetch(`${envd.url}/filesystem.Filesystem/Stat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'connect-protocol-version': '1' },
      body: JSON.stringify({ path: join(work, 'missing') }),
    });
    expect(res.status).toBe(404);
    const body = (await res.json()) as { code: string; message: string };
    expect(body.code).toBe('not_found');
    expect(body.message).toContain('file not found');
  });

  it('frames server-streaming JSON exactly as the SDK parses it', async () => {
    const json = Buffer.from(
      JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', 'exit 4'] }, stdin: false }),
    );
    const head = Buffer.alloc(5);
    head.writeUInt32BE(json.length, 1);
    const res = await fetch(`${envd.url}/process.Process/Start`, {
      method: 'POST',
      headers: { 'content-type': 'application/connect+json', 'connect-protocol-version': '1' },
      body: Buffer.concat([head, json]),
    });
    expect(res.headers.get('content-type')).toBe('application/connect+json');
    const raw = Buffer.from(await res.arrayBuffer());
    const frames: { flags: number; body: unknown }[] = [];
    for (let off = 0; off < raw.length;) {
      const len = raw.readUInt32BE(off + 1);
      frames.push({ flags: raw[off]!, body: JSON.parse(raw.subarray(off + 5, off + 5 + len).toString()) });
      off += 5 + len;
    }
    expect(frames[0]).toMatchObject({ flags: 0, body: { event: { start: { pid: expect.any(Number) } } } });
    expect(frames.at(-2)).toEqual({
      flags: 0,
      body: {
        event: { end: { exitCode: 4, exited: true, status: 'exit status 4', error: 'exit status 4' } },
      },
    });
    expect(frames.at(-1)).toEqual({ flags: 2, body: {} });
  });
});

describe('REST', () => {
  it('answers /health, /envs and /metrics', async () => {
    expect((await fetch(`${envd.url}/health`)).status).toBe(204);
    const envs = (await (await fetch(`${envd.url}/envs`)).json()) as Record<string, string>;
    expect(envs).toMatchObject({ FROM_INIT: '1', E2B_SANDBOX: 'true' });
    const m = (await (await fetch(`${envd.url}/metrics`)).json()) as Record<string, number>;
    for (const k of [
      'ts',
      'cpu_count',
      'cpu_used_pct',
      'mem_total',
      'mem_used',
      'mem_cache',
      'mem_total_mib',
      'mem_used_mib',
      'disk_used',
      'disk_total',
    ]) {
      expect(typeof m[k]).toBe('number');
    }
    expect(m.cpu_count).toBeGreaterThanOrEqual(1);
    expect(m.mem_total).toBeGreaterThan(m.mem_used!);
    expect(m.disk_total).toBeGreaterThan(0);
  });

  it('validates /init bodies', async () => {
    expect((await initEnvd(envd.url, { envVars: { A: 1 } })).status).toBe(400);
    expect((await initEnvd(envd.url, { defaultUser: 5 })).status).toBe(400);
    const res = await fetch(`${envd.url}/init`, { method: 'POST', body: '{not json' });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { code: number }).code).toBe(400);
  });

  it('serves downloads with Content-Disposition, Range, 304, gzip and 406', async () => {
    const file = join(work, 'download me.txt');
    writeFileSync(file, '0123456789');
    utimesSync(file, new Date('2026-01-01T00:00:00Z'), new Date('2026-01-01T00:00:00Z'));
    const url = `${envd.url}/files?path=${encodeURIComponent(file)}`;

    const plain = await fetch(url, { headers: { 'accept-encoding': 'identity' } });
    expect(plain.status).toBe(200);
    expect(plain.headers.get('content-disposition')).toBe('inline; filename="download me.txt"');
    expect(plain.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(plain.headers.get('vary')).toBe('Accept-Encoding');
    expect(await plain.text()).toBe('0123456789');

    const ranged = await fetch(url, { headers: { range: 'bytes=2-4' } });
    expect(ranged.status).toBe(206);
    expect(ranged.headers.get('content-range')).toBe('bytes 2-4/10');
    expect(await ranged.text()).toBe('234');
    expect((await fetch(url, { headers: { range: 'bytes=50-' } })).status).toBe(416);

    const cached = await fetch(url, {
      headers: { 'if-modified-since': new Date('2026-02-01T00:00:00Z').toUTCString() },
    });
    expect(cached.status).toBe(304);

    const gz = await fetch(url, { headers: { 'accept-encoding': 'gzip' } });
    expect(gz.headers.get('content-encoding')).toBe('gzip');
    expect(await gz.text()).toBe('0123456789'); // undici decompresses

    const none = await fetch(url, { headers: { 'accept-encoding': 'br, identity;q=0' } });
    expect(none.status).toBe(406);

    const missing = await fetch(`${envd.url}/files?path=${encodeURIComponent(join(work, 'nope'))}`);
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({
      code: 404,
      message: `path '${join(work, 'nope')}' does not exist`,
    });
    const dir = await fetch(`${envd.url}/files?path=${encodeURIComponent(work)}`);
    expect(dir.status).toBe(400);
  });

  it('accepts raw and gzip octet-stream uploads and rejects bad ones', async () => {
    const target = join(work, 'up', 'raw.bin');
    const res = await fetch(`${envd.url}/files?path=${encodeURIComponent(target)}`, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
      body: gzipSync(Buffer.from('unzipped content')),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual([{ path: target, name: 'raw.bin', type: 'file' }]);
    expect(readFileSync(target, 'utf8')).toBe('unzipped content');
    expect(statSync(join(work, 'up')).mode & 0o777).toBe(0o755);

    // undici's fetch decompresses transparently; read the raw bytes to see the gzip stream itself.
    const raw = await new Promise<{ encoding?: string; body: Buffer }>((resolve, reject) => {
      http
        .get(
          `${envd.url}/files?path=${encodeURIComponent(target)}`,
          { headers: { 'accept-encoding': 'gzip' } },
          (r) => {
            const chunks: Buffer[] = [];
            r.on('data', (c: Buffer) => chunks.push(c));
            r.on('end', () =>
              resolve({ encoding: r.headers['content-encoding'], body: Buffer.concat(chunks) }),
            );
          },
        )
        .on('error', reject);
    });
    expect(raw.encoding).toBe('gzip');
    expect(gunzipSync(raw.body).toString()).toBe('unzipped content');

    const noPath = await fetch(`${envd.url}/files`, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream' },
      body: 'x',
    });
    expect(noPath.status).toBe(400);
    const badType = await fetch(`${envd.url}/files?path=x`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'x',
    });
    expect(badType.status).toBe(400);
    const badGzip = await fetch(`${envd.url}/files?path=${encodeURIComponent(join(work, 'bad.gz'))}`, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
      body: 'definitely not gzip',
    });
    expect(badGzip.status).toBe(400);
    const badMeta = await fetch(`${envd.url}/files?path=${encodeURIComponent(join(work, 'm.txt'))}`, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream', 'x-metadata-k': 'x'.repeat(5000) },
      body: 'x',
    });
    expect(badMeta.status).toBe(400);

    const form = new FormData();
    form.append('file', new Blob(['a']), join(work, 'dup.txt'));
    form.append('file', new Blob(['b']), join(work, 'dup.txt'));
    const dup = await fetch(`${envd.url}/files`, { method: 'POST', body: form });
    expect(dup.status).toBe(400);
    expect(((await dup.json()) as { message: string }).message).toContain(
      'cannot upload multiple files to the same path',
    );

    const path = join(work, 'dir-target');
    mkdirSync(path);
    const onDir = await fetch(`${envd.url}/files?path=${encodeURIComponent(path)}`, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream' },
      body: 'x',
    });
    expect(onDir.status).toBe(400);
  });

  it('multipart: uses each part filename, keeps directories, ignores other fields', async () => {
    const form = new FormData();
    form.append('note', 'ignored');
    form.append('file', new Blob(['one']), join(work, 'mp', 'a', 'one.txt'));
    form.append('file', new Blob(['two']), join(work, 'mp', 'two.txt'));
    const res = await fetch(`${envd.url}/files`, { method: 'POST', body: form });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { path: string }[]).map((e) => e.path)).toEqual([
      join(work, 'mp', 'a', 'one.txt'),
      join(work, 'mp', 'two.txt'),
    ]);
    expect(readFileSync(join(work, 'mp', 'a', 'one.txt'), 'utf8')).toBe('one');
  });
});

describe('access token', () => {
  const token = 'secret-token-123';
  let secure: RunningTestEnvd;

  beforeAll(async () => {
    secure = await startHostEnvd(toolsDir);
    expect((await initEnvd(secure.url, { accessToken: token, defaultWorkdir: work })).status).toBe(204);
  });
  afterAll(async () => {
    await secure?.stop();
  });

  it('rejects RPC and REST calls without the token with E2B 401 JSON', async () => {
    const res = await fetch(`${secure.url}/process.Process/List`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ code: 401, message: UNAUTHORIZED_MESSAGE });
    const wrong = await fetch(`${secure.url}/envs`, { headers: { 'x-access-token': 'nope' } });
    expect(wrong.status).toBe(401);
    expect((await fetch(`${secure.url}/health`)).status).toBe(204);

    await expect(sdkSandbox(secure.url).commands.run('true')).rejects.toThrow(AuthenticationError);
    await expect(sdkSandbox(secure.url).files.read('/etc/hostname')).rejects.toThrow(AuthenticationError);
  });

  it('accepts the token (SDK sends it as X-Access-Token)', async () => {
    const sbx = sdkSandbox(secure.url, token);
    expect((await sbx.commands.run('echo ok')).stdout).toBe('ok\n');
    await sbx.files.write(join(work, 'secure.txt'), 'guarded');
    expect(await sbx.files.read(join(work, 'secure.txt'))).toBe('guarded');
    expect((await sbx.files.getInfo(join(work, 'secure.txt'))).type).toBe(FileType.FILE);
  });

  it('serves signed download and upload URLs, and rejects bad or expired signatures', async () => {
    const sbx = sdkSandbox(secure.url, token);
    const path = join(work, 'signed.txt');
    await sbx.files.write(path, 'signed content');
    const down = await sbx.downloadUrl(path);
    expect(new URL(down).searchParams.get('signature')).toMatch(/^v1_/);
    expect(await (await fetch(down)).text()).toBe('signed content');
    const expiring = await sbx.downloadUrl(path, { useSignatureExpiration: 60 });
    expect((await fetch(expiring)).status).toBe(200);

    const tampered = new URL(down);
    tampered.searchParams.set('path', join(work, 'other.txt'));
    expect((await fetch(tampered)).status).toBe(401);
    const past = String(Math.floor(Date.now() / 1000) - 10);
    const expired = new URL(`${secure.url}/files`);
    expired.searchParams.set('path', path);
    expired.searchParams.set('signature', fileSignature(path, 'read', '', token, past));
    expired.searchParams.set('signature_expiration', past);
    const expiredRes = await fetch(expired);
    expect(expiredRes.status).toBe(401);
    expect(((await expiredRes.json()) as { message: string }).message).toBe('signature is already expired');
    expect((await fetch(`${secure.url}/files?path=${encodeURIComponent(path)}`)).status).toBe(401);

    const up = await sbx.uploadUrl(join(work, 'signed-up.txt'));
    const form = new FormData();
    form.append('file', new Blob(['uploaded via signed url']), 'x.txt');
    expect((await fetch(up, { method: 'POST', body: form })).status).toBe(200);
    expect(readFileSync(join(work, 'signed-up.txt'), 'utf8')).toBe('uploaded via signed url');
    const readSig = new URL(down).searchParams.get('signature')!;
    const misuse = `${secure.url}/files?path=${encodeURIComponent(path)}&signature=${readSig}`;
    expect((await fetch(misuse, { method: 'POST', body: form })).status).toBe(401);
  });

  it('lets only the token holder re-run /init', async () => {
    expect((await initEnvd(secure.url, { accessToken: 'stolen' })).status).toBe(401);
    expect((await initEnvd(secure.url, { accessToken: 'stolen' }, 'wrong')).status).toBe(401);
    expect((await initEnvd(secure.url, { envVars: { B: '2' } }, token)).status).toBe(204);
    const envs = await fetch(`${secure.url}/envs`, { headers: { 'x-access-token': token } });
    expect(((await envs.json()) as Record<string, string>).B).toBe('2');
  });
});
