import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Writable } from 'node:stream';
import { connect as h2connect } from 'node:http2';
import { pino } from 'pino';
import { create, toBinary } from '@bufbuild/protobuf';
import type { DescService } from '@bufbuild/protobuf';
import { Code, ConnectError, createClient, type ServiceImpl } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { createSchedulerClient, ListNodesRequestSchema, Scheduler } from '@aenv/protocol';
import { startGrpcServer, type GrpcServer } from './grpc-server.js';
import { SchedulerMetrics } from './metrics.js';

const logged: string[] = [];
const log = pino({ level: 'error' }, new Writable({ write: (c, _e, cb) => (logged.push(String(c)), cb()) }));

/** A service whose answers show what the handler saw: the request, its headers, and a context after the call. */
const impl: Partial<ServiceImpl<typeof Scheduler>> = {
  listNodes: (_req, ctx) => {
    ctx.responseHeader.set('x-seen-probe', ctx.requestHeader.get('x-probe') ?? 'none');
    ctx.responseTrailer.set('x-trailer', 'kept');
    return { nodes: [{ nodeId: 'n1', endpoint: 'http://10.0.0.1:1' }] };
  },
  lookupNode: (req) => {
    if (req.sandboxId === 'boom') throw new Error('a bug, not an answer');
    if (req.sandboxId === 'gone') throw new ConnectError('sandbox ä, 100% gone', Code.NotFound);
    return { node: { nodeId: `for-${req.sandboxId}`, endpoint: 'http://10.0.0.2:1' } };
  },
};

describe('the scheduler gRPC endpoint: unary fast path and Connect', () => {
  let server: GrpcServer;
  const metrics = new SchedulerMetrics();
  let address = '';

  beforeAll(async () => {
    server = await startGrpcServer({
      address: { host: '127.0.0.1', port: 0 },
      routes: (router) => router.service(Scheduler, impl),
      fast: { service: Scheduler, impl: impl as Partial<ServiceImpl<DescService>> },
      metrics,
      log,
    });
    address = `127.0.0.1:${server.port}`;
  });
  afterAll(() => server.close());

  // The aenv client sends application/grpc+proto (the fast path); Connect's own transport in JSON
  // (application/grpc+json) is served by Connect's handler: both must say the same.
  const clients = () => ({
    fast: createSchedulerClient(address),
    connect: createClient(
      Scheduler,
      createGrpcTransport({ baseUrl: `http://${address}`, useBinaryFormat: false }),
    ),
  });

  it('answers the same through the fast path and through Connect', async () => {
    for (const [name, c] of Object.entries(clients())) {
      expect((await c.lookupNode({ sandboxId: 'abc' })).node?.nodeId, name).toBe('for-abc');
      let header: Headers | undefined;
      let trailer: Headers | undefined;
      const r = await c.listNodes(
        {},
        { headers: { 'x-probe': name }, onHeader: (h) => (header = h), onTrailer: (t) => (trailer = t) },
      );
      expect(
        r.nodes.map((n) => n.nodeId),
        name,
      ).toEqual(['n1']);
      expect(header?.get('x-seen-probe'), name).toBe(name);
      expect(trailer?.get('x-trailer'), name).toBe('kept');
      const gone = await c.lookupNode({ sandboxId: 'gone' }).catch((e: unknown) => e as ConnectError);
      expect(gone, name).toMatchObject({ code: Code.NotFound, rawMessage: 'sandbox ä, 100% gone' });
      const boom = await c.lookupNode({ sandboxId: 'boom' }).catch((e: unknown) => e as ConnectError);
      expect(boom, name).toMatchObject({ code: Code.Internal, rawMessage: 'internal error' });
    }
    expect(logged.filter((l) => l.includes('a bug, not an answer'))).toHaveLength(2);
  });

  it('counts fast-path calls in the RPC metrics', async () => {
    const before = await metrics.registry.getSingleMetricAsString('agentenv_scheduler_rpc_duration_seconds');
    const count = (text: string, status: string) =>
      Number(new RegExp(`_count\\{rpc="LookupNode",status="${status}"\\} (\\d+)`).exec(text)?.[1] ?? '0');
    const c = createSchedulerClient(address);
    await c.lookupNode({ sandboxId: 'x' });
    await c.lookupNode({ sandboxId: 'gone' }).catch(() => undefined);
    const after = await metrics.registry.getSingleMetricAsString('agentenv_scheduler_rpc_duration_seconds');
    expect(count(after, 'OK') - count(before, 'OK')).toBe(1);
    expect(count(after, 'NotFound') - count(before, 'NotFound')).toBe(1);
  });

  it('sends headers, message and trailers encoded per gRPC (grpc-message percent-encoded)', async () => {
    const session = h2connect(`http://${address}`);
    try {
      const answer = await new Promise<{ head: Record<string, unknown>; trailers: Record<string, unknown> }>(
        (resolve, reject) => {
          const s = session.request({
            ':method': 'POST',
            ':path': '/scheduler.v1.Scheduler/LookupNode',
            'content-type': 'application/grpc',
            te: 'trailers',
          });
          let head: Record<string, unknown> = {};
          s.on('response', (h) => (head = h));
          s.on('trailers', (t) => resolve({ head, trailers: t }));
          s.on('error', reject);
          s.resume();
          const msg = Buffer.from([0x0a, 4, ...Buffer.from('gone')]);
          const prefix = Buffer.alloc(5);
          prefix.writeUInt32BE(msg.length, 1);
          s.end(Buffer.concat([prefix, msg]));
        },
      );
      expect(answer.head['content-type']).toBe('application/grpc');
      expect(answer.trailers['grpc-status']).toBe(String(Code.NotFound));
      expect(answer.trailers['grpc-message']).toBe('sandbox %C3%A4, 100%25 gone');
    } finally {
      session.close();
    }
  });

  it('refuses a message that is not protobuf, and one that ends early', async () => {
    const session = h2connect(`http://${address}`);
    const status = (body: Buffer) =>
      new Promise<unknown>((resolve, reject) => {
        const s = session.request({
          ':method': 'POST',
          ':path': '/scheduler.v1.Scheduler/ListNodes',
          'content-type': 'application/grpc+proto',
          te: 'trailers',
        });
        s.on('trailers', (t) => resolve(t['grpc-status']));
        s.on('error', reject);
        s.resume();
        s.end(body);
      });
    try {
      const valid = Buffer.from(toBinary(ListNodesRequestSchema, create(ListNodesRequestSchema, {})));
      const framed = (msg: Buffer, declared = msg.length) => {
        const p = Buffer.alloc(5);
        p.writeUInt32BE(declared, 1);
        return Buffer.concat([p, msg]);
      };
      expect(await status(framed(valid))).toBe('0');
      expect(await status(framed(Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f])))).toBe(
        String(Code.Internal),
      );
      expect(await status(framed(Buffer.from([1, 2]), 10))).toBe(String(Code.InvalidArgument));
      expect(await status(Buffer.from([0, 0]))).toBe(String(Code.Unimplemented));
    } finally {
      session.close();
    }
  });
});
