// Serves an events route (cluster-events.ts) and writes its answer.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { requestFraming } from '@aenv/proxy';
import { ListError } from './cluster-list.js';
import {
  mergedDeliveries,
  mergedSandboxEvents,
  mergedStats,
  webhookWrite,
  type EventsContext,
  type EventsRoute,
} from './cluster-events.js';

/** A webhook or secret body is small (a URL, a name, a value, metadata); the node's own limit is far above it. */
export const MAX_WEBHOOK_BODY_BYTES = 64 * 1024;

export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const framing = requestFraming(req);
  if (!framing.hasBody) return Buffer.alloc(0);
  const tooLarge = () => new ListError(413, `request body larger than ${MAX_WEBHOOK_BODY_BYTES} bytes`);
  if (framing.length !== undefined && framing.length > MAX_WEBHOOK_BODY_BYTES) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_WEBHOOK_BODY_BYTES) throw tooLarge();
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

export function send(res: ServerResponse, status: number, body: string, contentType?: string): void {
  res
    .writeHead(status, {
      ...(contentType ? { 'content-type': contentType } : {}),
      'content-length': String(Buffer.byteLength(body)),
    })
    .end(body);
}

export async function clusterEvents(
  ctx: EventsContext,
  r: EventsRoute,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  const search = q < 0 ? '' : url.slice(q + 1);
  switch (r.op) {
    case 'webhook-write': {
      const a = await webhookWrite(ctx, req, url, await readBody(req));
      return send(res, a.status, a.body, a.headers['content-type']);
    }
    case 'deliveries':
      return send(
        res,
        200,
        JSON.stringify(await mergedDeliveries(ctx, req, path, search)),
        'application/json',
      );
    case 'stats':
      return send(res, 200, JSON.stringify(await mergedStats(ctx, req, url)), 'application/json');
    case 'sandbox-events':
      return send(
        res,
        200,
        JSON.stringify(await mergedSandboxEvents(ctx, req, path, search)),
        'application/json',
      );
  }
}
