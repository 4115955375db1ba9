// A real webhook receiver for tests: an HTTP server on loopback that verifies each delivery's `e2b-signature` the
// way E2B's receiver example does (its own code, not the node's signer), records it, and answers as told.
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type ReceiverAnswer = { status: number } | { slowMs: number; status: number };

export interface ReceivedDelivery {
  headers: IncomingMessage['headers'];
  raw: string;
  body: Record<string, unknown>;
  signatureValid: boolean;
  answered: number;
}

/** E2B's documented verification: base64url(sha256(secret + raw body)) without padding. */
export function expectedSignature(secret: string, raw: string): string {
  const b64 = createHash('sha256')
    .update(secret + raw)
    .digest('base64');
  return b64.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

export class TestWebhookReceiver {
  readonly received: ReceivedDelivery[] = [];
  /** Answers for the next deliveries, in order; once empty, every delivery gets 200. */
  readonly answers: ReceiverAnswer[] = [];
  private server: Server | undefined;
  private port = 0;

  constructor(readonly secret: string) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}/hook`;
  }

  /** Listens (again, on the same port after a close). */
  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  /** Stops listening: deliveries meet a refused connection until start(). */
  async close(): Promise<void> {
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server!.close(() => resolve()));
    this.server = undefined;
  }

  /** Deliveries of one event (by the event id in the body). */
  of(eventId: string): ReceivedDelivery[] {
    return this.received.filter((d) => d.body.id === eventId);
  }

  /** Resolves once `pred` holds (bounded: rejects after `ms`). */
  async waitFor(pred: (r: ReceivedDelivery[]) => boolean, ms = 15_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!pred(this.received)) {
      if (Date.now() > deadline)
        throw new Error(`receiver: condition not met in ${ms} ms; got ${this.received.length} deliveries`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    const answer = this.answers.shift() ?? { status: 200 };
    let body: Record<string, unknown> = {};
    try {
      body = JSON.parse(raw) as Record<string, unknown>;
    } catch {
      // recorded as {}: the test's assertions on the body then fail
    }
    this.received.push({
      headers: req.headers,
      raw,
      body,
      signatureValid: req.headers['e2b-signature'] === expectedSignature(this.secret, raw),
      answered: answer.status,
    });
    if ('slowMs' in answer) await new Promise((r) => setTimeout(r, answer.slowMs));
    if (!res.destroyed)
      res.writeHead(answer.status, { 'content-type': 'text/plain' }).end(`answer ${answer.status}`);
  }
}
