import { afterEach, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import {
  constants,
  createServer,
  type Http2Server,
  type IncomingHttpHeaders,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from 'node:http2';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { create, toBinary } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { LookupNodeResponseSchema, Scheduler } from '../../gen/scheduler/v1/scheduler_pb.js';
import { createSchedulerClient } from './index.js';

const servers: Http2Server[] = [];
const sessions: ServerHttp2Session[] = [];
afterEach(async () => {
  // Sessions left open by a test's client must not keep close() waiting.
  for (const s of sessions.splice(0)) s.destroy();
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

function listen(server: Http2Server, port = 0): Promise<number> {
  servers.push(server);
  server.on('session', (s) => sessions.push(s));
  return new Promise((resolve) =>
    server.listen(port, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
  );
}

/** A scheduler served by another gRPC implementation (Connect's handler). */
async function connectServer(port = 0): Promise<number> {
  return listen(
    createServer(
      connectNodeAdapter({
        grpc: true,
        grpcWeb: false,
        connect: false,
        routes: (router) =>
          router.service(Scheduler, {
            lookupNode: async (req, ctx) => {
              if (req.sandboxId === 'slow') await new Promise((r) => setTimeout(r, 2_000));
              if (req.sandboxId === 'gone') throw new ConnectError('sandbox ä, 100% gone', Code.NotFound);
              if (req.sandboxId === 'bad')
                throw new ConnectError('sandbox_id is required', Code.InvalidArgument);
              const probe = ctx.requestHeader.get('x-probe') ?? '';
              return { node: { nodeId: `for-${req.sandboxId}${probe}`, endpoint: 'http://10.0.0.1:1' } };
            },
          }),
      }),
    ),
    port,
  );
}

/** An HTTP/2 server answering every stream with `answer` (a misbehaving or minimal gRPC peer). */
async function rawServer(answer: (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void) {
  const server = createServer();
  server.on('stream', (stream, headers) => {
    stream.on('error', () => undefined);
    stream.resume();
    stream.once('end', () => answer(stream, headers));
  });
  return listen(server);
}

function envelope(bytes: Uint8Array): Buffer {
  const p = Buffer.alloc(5);
  p.writeUInt32BE(bytes.length, 1);
  return Buffer.concat([p, bytes]);
}
const lookupAnswer = envelope(
  toBinary(
    LookupNodeResponseSchema,
    create(LookupNodeResponseSchema, { node: { nodeId: 'raw', endpoint: 'e' } }),
  ),
);

const failure = (p: Promise<unknown>) =>
  p.then(
    () => {
      throw new Error('the call succeeded');
    },
    (e: unknown) => e as ConnectError,
  );

describe('the scheduler client (unary gRPC over one HTTP/2 connection)', () => {
  it('calls, passes headers, and reuses one connection for every call', async () => {
    let sessions = 0;
    const port = await connectServer();
    servers.at(-1)!.on('session', () => sessions++);
    const c = createSchedulerClient(`127.0.0.1:${port}`);
    const answers = await Promise.all(['a', 'b', 'c'].map((id) => c.lookupNode({ sandboxId: id })));
    expect(answers.map((a) => a.node?.nodeId)).toEqual(['for-a', 'for-b', 'for-c']);
    expect((await c.lookupNode({ sandboxId: 'd' }, { headers: { 'x-probe': '!' } })).node?.nodeId).toBe(
      'for-d!',
    );
    expect(sessions).toBe(1);
  });

  it('gives the server’s code and message (percent-decoded)', async () => {
    const c = createSchedulerClient(`127.0.0.1:${await connectServer()}`);
    expect(await failure(c.lookupNode({ sandboxId: 'gone' }))).toMatchObject({
      code: Code.NotFound,
      rawMessage: 'sandbox ä, 100% gone',
    });
    expect(await failure(c.lookupNode({ sandboxId: 'bad' }))).toMatchObject({
      code: Code.InvalidArgument,
      rawMessage: 'sandbox_id is required',
    });
  });

  it('fails a call past its deadline (DeadlineExceeded) and sends the deadline as grpc-timeout', async () => {
    let timeout: unknown;
    const port = await rawServer((s, h) => (timeout = h['grpc-timeout']));
    const c = createSchedulerClient(`127.0.0.1:${port}`, { timeoutMs: 150 });
    const started = performance.now();
    expect(await failure(c.lookupNode({ sandboxId: 'x' }))).toMatchObject({ code: Code.DeadlineExceeded });
    expect(performance.now() - started).toBeLessThan(1_500);
    expect(timeout).toBe('150m');
  });

  it('drops a connection that answered nothing for a whole deadline, and calls again on a new one', async () => {
    let streams = 0;
    const sessions = new Set<unknown>();
    const server = createServer();
    server.on('stream', (stream) => {
      sessions.add(stream.session);
      stream.on('error', () => undefined);
      stream.resume();
      // The first session swallows its call; the next one answers.
      if (streams++ === 0) return;
      stream.once('end', () => {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        stream.end(lookupAnswer);
      });
    });
    const c = createSchedulerClient(`127.0.0.1:${await listen(server)}`, { timeoutMs: 200 });
    expect(await failure(c.lookupNode({ sandboxId: 'x' }))).toMatchObject({ code: Code.DeadlineExceeded });
    expect((await c.lookupNode({ sandboxId: 'x' })).node?.nodeId).toBe('raw');
    expect(sessions.size).toBe(2);
  });

  it('says Unavailable when the scheduler cannot be reached, and reconnects once it is back', async () => {
    const probe = createServer();
    const port = await listen(probe);
    await new Promise((r) => probe.close(r));
    servers.pop();
    const c = createSchedulerClient(`127.0.0.1:${port}`);
    const e = await failure(c.lookupNode({ sandboxId: 'x' }));
    expect(e).toMatchObject({ code: Code.Unavailable });
    expect(e.rawMessage).toMatch(/ECONNREFUSED/);
    await connectServer(port);
    expect((await c.lookupNode({ sandboxId: 'x' })).node?.nodeId).toBe('for-x');
  });

  it('maps answers that are not a plain success', async () => {
    const cases: [string, (s: ServerHttp2Stream) => void, Code][] = [
      [
        'trailers-only status',
        (s) =>
          s.respond(
            {
              ':status': 200,
              'content-type': 'application/grpc',
              'grpc-status': '14',
              'grpc-message': 'busy',
            },
            { endStream: true },
          ),
        Code.Unavailable,
      ],
      ['HTTP 503', (s) => s.respond({ ':status': 503 }, { endStream: true }), Code.Unavailable],
      ['HTTP 404', (s) => s.respond({ ':status': 404 }, { endStream: true }), Code.Unimplemented],
      [
        'not gRPC',
        (s) => {
          s.respond({ ':status': 200, 'content-type': 'text/html' });
          s.end('<html>');
        },
        Code.Unknown,
      ],
      ['reset: refused', (s) => s.close(constants.NGHTTP2_REFUSED_STREAM), Code.Unavailable],
      [
        'no status',
        (s) => {
          s.respond({ ':status': 200, 'content-type': 'application/grpc' });
          s.end(lookupAnswer);
        },
        Code.Internal,
      ],
      [
        'two messages',
        (s) => {
          s.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
          s.once('wantTrailers', () => s.sendTrailers({ 'grpc-status': '0' }));
          s.end(Buffer.concat([lookupAnswer, lookupAnswer]));
        },
        Code.Unimplemented,
      ],
      [
        'compressed without an encoding',
        (s) => {
          s.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
          s.once('wantTrailers', () => s.sendTrailers({ 'grpc-status': '0' }));
          s.end(Buffer.concat([Buffer.from([1]), lookupAnswer.subarray(1)]));
        },
        Code.Internal,
      ],
    ];
    for (const [name, answer, code] of cases) {
      const c = createSchedulerClient(`127.0.0.1:${await rawServer(answer)}`);
      expect((await failure(c.lookupNode({ sandboxId: 'x' }))).code, name).toBe(code);
    }
  });

  it('cancels a call whose signal aborts', async () => {
    const c = createSchedulerClient(`127.0.0.1:${await connectServer()}`);
    const ac = new AbortController();
    const call = failure(c.lookupNode({ sandboxId: 'slow' }, { signal: ac.signal }));
    setTimeout(() => ac.abort(), 50);
    expect(await call).toMatchObject({ code: Code.Canceled });
  });

  it('does not keep a process alive once its calls are done', async () => {
    const port = await connectServer();
    const client = fileURLToPath(new URL('./index.ts', import.meta.url));
    const script = `
      const { createSchedulerClient } = await import(${JSON.stringify(client)});
      const c = createSchedulerClient('127.0.0.1:${port}');
      const r = await c.lookupNode({ sandboxId: 'x' });
      console.log(r.node.nodeId);`;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => {
      const t = setTimeout(() => {
        child.kill('SIGKILL');
        resolve(null);
      }, 15_000);
      child.on('exit', (c) => {
        clearTimeout(t);
        resolve(c);
      });
    });
    expect({ code, out: out.trim() }).toEqual({ code: 0, out: 'for-x' });
  });
});
