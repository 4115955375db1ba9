import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';

export type Req = IncomingMessage | Http2ServerRequest;
export type Res = ServerResponse | Http2ServerResponse;

/** An error that becomes `{"code": status, "message": …}` (E2B envd's REST error body). */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export function sendJson(
  res: Res,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const data = Buffer.from(JSON.stringify(body));
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': String(data.length),
    ...headers,
  });
  res.end(data);
}

export function sendError(res: Res, status: number, message: string): void {
  sendJson(res, status, { code: status, message });
}

export function sendEmpty(res: Res, status: number): void {
  res.writeHead(status);
  res.end();
}

export async function readBody(req: Req, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new HttpError(413, `request body larger than ${limit} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/**
 * Reads and discards what is left of a request body (up to maxBytes), so an error response sent before
 * the client finished uploading reaches it instead of a reset connection. Resolves false when the body
 * was larger than that and the connection should be closed instead.
 */
export function drainRequest(req: Req, maxBytes = 64 * 1024 * 1024): Promise<boolean> {
  if (req.readableEnded || req.destroyed) return Promise.resolve(true);
  return new Promise((resolve) => {
    let seen = 0;
    const done = (ok: boolean) => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onEnd);
      resolve(ok);
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen > maxBytes) done(false);
    };
    const onEnd = () => done(true);
    // An abandoned async iterator or pipe would keep the stream paused: take it over.
    req.removeAllListeners('readable');
    req.unpipe();
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onEnd);
    req.resume();
  });
}
