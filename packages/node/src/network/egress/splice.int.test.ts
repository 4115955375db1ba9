// The splice helper (native/aenv-splice.c, splice.ts) behind the egress proxy, over loopback: real sockets,
// the helper built by gcc as the node builds it. Bulk transfers both ways must arrive byte for byte, a
// half-close must stay a half-close in either direction, and when the helper cannot be built or vanishes the
// connection must carry on through Node's pipes.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EgressProxy } from './proxy.js';
import { SlotRegistry } from './slot-registry.js';
import { buildSpliceHelper, Splicer } from './splice.js';
import { UpstreamResolver } from './upstream.js';

const log = { debug() {}, info() {}, warn() {}, error() {} };
const MiB = 1024 * 1024;

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

function listen(server: Server): Promise<number> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)),
  );
}

function readAll(s: Socket): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    s.on('data', (c: Buffer) => chunks.push(c));
    s.once('end', () => resolve(Buffer.concat(chunks)));
    s.once('error', reject);
  });
}

/**
 * The upstream: in mode "client-first" it reads until the client's half-close, then answers with `reply` and
 * the hash of what it read; in "upstream-first" it sends `reply` and half-closes, then reads until the client's
 * end and records the hash of what it got.
 */
function upstreamServer(mode: { first: 'client' | 'upstream' }, reply: Buffer, got: string[]): Server {
  return createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => undefined);
    if (mode.first === 'client') {
      void readAll(s).then((b) => {
        s.write(reply);
        s.end(sha(b));
      });
    } else {
      s.end(reply);
      void readAll(s).then((b) => got.push(sha(b)));
    }
  });
}

function head(name: string): Buffer {
  return Buffer.from(
    `POST /upload HTTP/1.1\r\nHost: ${name}\r\ncontent-type: application/octet-stream\r\n\r\n`,
  );
}

/** Resolves once `ok()` holds, checked every 10 ms (waits for socket state; asserts nothing about time). */
function until(ok: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    const t = setInterval(() => {
      if (ok()) {
        clearInterval(t);
        resolve();
      }
    }, 10);
  });
}

describe('Splicer.handOff', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it('keeps what Node had read and queued ahead of what the helper copies', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aenv-splice-'));
    dirs.push(dir);
    const accepted: Socket[] = [];
    const server = createServer({ allowHalfOpen: true }, (s) => accepted.push(s));
    const port = await listen(server);
    // Two loopback connections: ca ⇄ sa stands for the sandbox's, sb ⇄ cb for the upstream's; the proxy's
    // sockets (sa, sb) are handed off.
    const ca = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    await until(() => accepted.length === 1);
    const cb = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    await until(() => accepted.length === 2);
    const [sa, sb] = accepted as [Socket, Socket];
    sa.pause();
    cb.pause();
    // Read by Node, not yet delivered: part of `x` sits in sa's buffer.
    const x = randomBytes(MiB);
    ca.write(x);
    await until(() => sa.readableLength > 0);
    // Queued by Node, not yet in the kernel: cb is not reading, so most of `q` waits in sb's write queue.
    const q = randomBytes(32 * MiB);
    sb.write(q);
    await until(() => sb.writableLength > 16 * MiB);
    const splicer = new Splicer(await buildSpliceHelper(dir));
    let finished: boolean | undefined;
    const spliced = splicer.handOff(sa, sb, (fellBack) => (finished = fellBack));
    expect(spliced).not.toBeNull();
    const x2 = randomBytes(8 * MiB);
    ca.end(x2);
    const z = randomBytes(8 * MiB);
    const toUpstream = readAll(cb);
    cb.resume();
    cb.end(z);
    const toSandbox = readAll(ca);
    expect(sha(await toUpstream)).toBe(sha(Buffer.concat([q, x, x2])));
    expect(sha(await toSandbox)).toBe(sha(z));
    await until(() => finished !== undefined);
    expect(finished).toBe(false);
    expect(splicer.stats).toMatchObject({ running: 0, handedOff: 1, fellBack: 0 });
    ca.destroy();
    cb.destroy();
    server.close();
  });
});

describe('egress proxy with the splice helper (loopback)', () => {
  const registry = new SlotRegistry();
  const mode: { first: 'client' | 'upstream' } = { first: 'client' };
  const reply = randomBytes(48 * MiB);
  const upstreamGot: string[] = [];
  const upstream = upstreamServer(mode, reply, upstreamGot);
  let upstreamPort: number;
  let dir: string;
  const proxies: EgressProxy[] = [];

  async function proxy(splice: ConstructorParameters<typeof EgressProxy>[0]['splice']): Promise<{
    proxy: EgressProxy;
    port: number;
  }> {
    const resolver = new UpstreamResolver({ servers: [], deniedCidrs: [] });
    resolver.resolve = () => Promise.resolve({ ok: true, address: '127.0.0.1', ttl: 1 });
    const p = new EgressProxy({
      ports: [upstreamPort],
      listenPort: 0,
      registry,
      resolver,
      logger: log,
      ...(splice ? { splice } : {}),
    });
    await p.start();
    proxies.push(p);
    return { proxy: p, port: p.listenPorts.get(upstreamPort) as number };
  }

  /** Client → upstream then upstream → client, each 48 MiB, client half-closing first. */
  async function clientFirst(port: number): Promise<void> {
    mode.first = 'client';
    const sent = Buffer.concat([head('ok.test'), randomBytes(48 * MiB)]);
    const s = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    s.end(sent);
    const got = await readAll(s);
    s.destroy();
    expect(got.length).toBe(reply.length + 64);
    expect(sha(got.subarray(0, reply.length))).toBe(sha(reply));
    // What the upstream read up to the client's half-close, hashed by it after that half-close.
    expect(got.subarray(reply.length).toString()).toBe(sha(sent));
  }

  /** Upstream sends 48 MiB and half-closes; the client, after that EOF, sends 48 MiB back. */
  async function upstreamFirst(port: number): Promise<void> {
    mode.first = 'upstream';
    const before = upstreamGot.length;
    const s = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    s.write(head('ok.test'));
    const got = await readAll(s);
    expect(sha(got)).toBe(sha(reply));
    const back = randomBytes(48 * MiB);
    await new Promise<void>((resolve) => {
      s.once('close', () => resolve());
      s.end(back);
    });
    await until(() => upstreamGot.length > before);
    expect(upstreamGot[before]).toBe(sha(Buffer.concat([head('ok.test'), back])));
  }

  beforeAll(async () => {
    upstreamPort = await listen(upstream);
    dir = await mkdtemp(join(tmpdir(), 'aenv-splice-'));
    registry.set(['127.0.0.1'], { index: 1, patterns: ['ok.test'], anyName: false });
  });
  afterAll(async () => {
    for (const p of proxies) await p.stop();
    upstream.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('copies bulk transfers in the kernel, intact both ways, with half-closes either way round', async () => {
    const { proxy: p, port } = await proxy({ dir, afterBytes: 64 * 1024 });
    expect((await readdir(dir)).some((f) => f.startsWith('aenv-splice-'))).toBe(true);
    await clientFirst(port);
    await upstreamFirst(port);
    expect(p.spliceStats).toMatchObject({ handedOff: 2, fellBack: 0 });
  });

  it('hands off a connection whose first bytes were still buffered in Node (tiny threshold)', async () => {
    const { proxy: p, port } = await proxy({ dir, afterBytes: 1 });
    await clientFirst(port);
    await upstreamFirst(port);
    expect(p.spliceStats).toMatchObject({ handedOff: 2, fellBack: 0 });
  });

  it('stays in Node when the helper cannot be built', async () => {
    const { proxy: p, port } = await proxy({ dir: join(dir, 'nogcc'), gcc: '/nonexistent/gcc' });
    await clientFirst(port);
    await upstreamFirst(port);
    expect(p.spliceStats).toMatchObject({ handedOff: 0, running: 0 });
  });

  it('falls back to Node mid-connection when the helper cannot be started', async () => {
    const gone = join(dir, 'gone');
    const { proxy: p, port } = await proxy({ dir: gone, afterBytes: 64 * 1024 });
    for (const f of await readdir(gone)) await rm(join(gone, f));
    await clientFirst(port);
    await upstreamFirst(port);
    expect(p.spliceStats).toMatchObject({ handedOff: 2, fellBack: 2, running: 0 });
  });

  it('a cut (the sandbox is gone) and stop() end the helpers and close the connections', async () => {
    // The upstream never ends: it streams until the connection is cut.
    const endless = createServer({ allowHalfOpen: true }, (s) => {
      s.on('error', () => undefined);
      const chunk = Buffer.alloc(MiB);
      const pump = () => {
        while (!s.destroyed && s.write(chunk));
      };
      s.on('drain', pump);
      pump();
    });
    const endlessPort = await listen(endless);
    const resolver = new UpstreamResolver({ servers: [], deniedCidrs: [] });
    resolver.resolve = () => Promise.resolve({ ok: true, address: '127.0.0.1', ttl: 1 });
    const q = new EgressProxy({
      ports: [endlessPort],
      listenPort: 0,
      registry,
      resolver,
      logger: log,
      splice: { dir, afterBytes: 64 * 1024 },
    });
    await q.start();
    proxies.push(q);
    const qport = q.listenPorts.get(endlessPort) as number;
    const open = async () => {
      const s = connect({ port: qport, host: '127.0.0.1' });
      s.on('error', () => undefined);
      s.write(head('ok.test'));
      let got = 0;
      await new Promise<void>((resolve) =>
        s.on('data', (c: Buffer) => {
          got += c.length;
          if (got > 8 * MiB) resolve();
        }),
      );
      return s;
    };
    const a = await open();
    expect(q.spliceStats?.running).toBe(1);
    const closed = (s: Socket) => new Promise<void>((resolve) => s.once('close', () => resolve()));
    // The slot is forgotten: its connections are cut, the helpers with them.
    registry.delete(1);
    const cutA = closed(a);
    q.recheck(1);
    await cutA;
    registry.set(['127.0.0.1'], { index: 1, patterns: ['ok.test'], anyName: false });
    const c = await open();
    expect(q.spliceStats?.running).toBeGreaterThan(0);
    const stopped = closed(c);
    await q.stop();
    await stopped;
    await until(() => q.spliceStats?.running === 0);
    expect(q.spliceStats).toMatchObject({ running: 0, handedOff: 2, fellBack: 0 });
    endless.close();
  });
});
