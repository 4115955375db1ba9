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
