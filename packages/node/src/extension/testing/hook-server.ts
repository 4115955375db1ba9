// A real custom extension for tests: an HTTP server on loopback that records every hook call and answers as the
// test tells it (an answer, a status, a delay, a malformed or huge body, or a dropped connection).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type HookBehaviour =
  | { kind: 'json'; body: unknown; status?: number }
  | { kind: 'status'; status: number }
  | { kind: 'raw'; text: string }
  | { kind: 'huge'; bytes: number }
  /** Answers `then` after `ms` (past the client's timeout, the client gives up first). */
  | { kind: 'slow'; ms: number; then: HookBehaviour }
  /** Closes the connection without answering. */
  | { kind: 'drop' };

export interface HookCall {
  hook: string;
  body: Record<string, unknown>;
  at: number;
}

export class TestHookServer {
  readonly calls: HookCall[] = [];
  /** How each hook answers; unset hooks answer 200 with `{}` (patch-params: the patch as the new params). */
  readonly behaviour = new Map<string, HookBehaviour>();
  private server: Server | undefined;
  private waiters: (() => void)[] = [];

  get url(): string {
    const a = this.server!.address() as AddressInfo;
    return `http://127.0.0.1:${a.port}`;
  }

  async start(port = 0): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(port, '127.0.0.1', () => resolve());
    });
    return this;
  }

  async close(): Promise<void> {
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server!.close(() => resolve()));
    this.server = undefined;
  }

  /** Calls of `hook` (optionally for one sandbox). */
  of(hook: string, sandboxId?: string): HookCall[] {
    return this.calls.filter(
      (c) => c.hook === hook && (sandboxId === undefined || c.body.sandboxId === sandboxId),
    );
  }

  /** Resolves once `pred` holds for the recorded calls (bounded: rejects after `ms`). */
  async waitFor(pred: (calls: HookCall[]) => boolean, ms = 10_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!pred(this.calls)) {
      if (Date.now() > deadline) throw new Error(`hook calls never matched: ${JSON.stringify(this.calls)}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 100);
      });
    }
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const hook = (req.url ?? '').replace(/^\/sandbox-hook\//, '');
    let body: Record<string, unknown> = {};
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
    } catch {
      body = { unparsable: true };
    }
    if (req.method !== 'POST' || !req.url?.startsWith('/sandbox-hook/')) {
      res.writeHead(404).end();
      return;
    }
    this.calls.push({ hook, body, at: Date.now() });
    for (const w of this.waiters.splice(0)) w();
    const fallback: HookBehaviour =
      hook === 'patch-params'
        ? { kind: 'json', body: { customExtensionParams: body.patch } }
        : { kind: 'json', body: {} };
    await this.answer(res, this.behaviour.get(hook) ?? fallback);
  }

  private async answer(res: ServerResponse, b: HookBehaviour): Promise<void> {
    switch (b.kind) {
      case 'json':
        res.writeHead(b.status ?? 200, { 'content-type': 'application/json' }).end(JSON.stringify(b.body));
        return;
      case 'status':
        res.writeHead(b.status, { 'content-type': 'text/plain' }).end('hook says no');
        return;
      case 'raw':
        res.writeHead(200, { 'content-type': 'application/json' }).end(b.text);
        return;
      case 'huge': {
        res.writeHead(200, { 'content-type': 'application/json' });
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        for (let sent = 0; sent < b.bytes && !res.destroyed; sent += chunk.length) {
          if (!res.write(chunk)) await drainedOrClosed(res);
        }
        res.end();
        return;
      }
      case 'slow':
        await new Promise((r) => setTimeout(r, b.ms));
        if (!res.destroyed) await this.answer(res, b.then);
        return;
      case 'drop':
        res.socket?.destroy();
        return;
    }
  }
}

function drainedOrClosed(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}
