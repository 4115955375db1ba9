// How a client's request body is framed, decided once at the front (docs/security.md, "Request smuggling").
// Node's parser already refuses what is ambiguous at the byte level (Content-Length with Transfer-Encoding,
// repeated Content-Length, obs-fold, bad chunk syntax: see the node's api/http-server.ts for their 400); what it lets
// through is checked here, and the body is then re-framed by the upstream client, never passed on raw.
import type { IncomingMessage } from 'node:http';

export class FramingError extends Error {}

export interface BodyFraming {
  /** Whether the request has a body to forward at all. */
  hasBody: boolean;
  /** Its exact length when the client gave one (else it is forwarded chunked). */
  length?: number;
}

export function requestFraming(req: IncomingMessage): BodyFraming {
  const te = req.headers['transfer-encoding'];
  const cl = req.headers['content-length'];
  if (te !== undefined) {
    // Node accepts a coding list ending in chunked ("gzip, chunked"); nobody needs that through a proxy.
    if (te.trim().toLowerCase() !== 'chunked')
      throw new FramingError(`unsupported Transfer-Encoding '${te}': only chunked is accepted`);
    if (cl !== undefined) throw new FramingError('Content-Length and Transfer-Encoding together');
    return { hasBody: true };
  }
  if (cl === undefined) return { hasBody: false };
  if (!/^\d{1,15}$/.test(cl)) throw new FramingError('invalid Content-Length');
  const length = Number(cl);
  return length > 0 ? { hasBody: true, length } : { hasBody: false };
}
