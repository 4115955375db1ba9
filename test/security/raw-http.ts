// Exact-bytes HTTP for the proxy security tests: send what an attacker would send on one connection, read
// every answer that comes back on it (pipelining included), and nothing else.
import { connect } from 'node:net';

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  /** Header lines as received (name as sent, repeats kept). */
  rawHeaders: [string, string][];
  body: string;
}

export interface RawExchange {
  responses: RawResponse[];
  /** The server closed the connection. */
  closed: boolean;
}

const CRLF = '\r\n';

/** A request: the head lines joined with CRLF, a blank line, then `body` as is. */
export function httpRequest(head: string[], body = ''): string {
  return head.join(CRLF) + CRLF + CRLF + body;
}

/** One chunked encoding of `data` (a single chunk and the last one). */
export function chunked(data: string): string {
  const n = Buffer.byteLength(data);
  return n ? `${n.toString(16)}${CRLF}${data}${CRLF}0${CRLF}${CRLF}` : `0${CRLF}${CRLF}`;
}

/** Parses complete responses off the front of `buf`; returns them and the unread rest. */
function parse(buf: Buffer, eof: boolean): { done: RawResponse[]; rest: Buffer } {
  const done: RawResponse[] = [];
  for (;;) {
    const end = buf.indexOf('\r\n\r\n');
    if (end < 0) break;
    const lines = buf.subarray(0, end).toString('latin1').split(CRLF);
    const status = Number(lines[0]!.split(' ')[1]);
    const rawHeaders: [string, string][] = lines.slice(1).map((l) => {
      const i = l.indexOf(':');
      return [l.slice(0, i).trim(), l.slice(i + 1).trim()];
    });
    const headers: Record<string, string> = {};
    for (const [k, v] of rawHeaders) headers[k.toLowerCase()] = v;
    let rest = buf.subarray(end + 4);
    let body: Buffer | undefined;
    if (status === 101 || status === 204 || status === 304 || (status >= 100 && status < 200))
      body = Buffer.alloc(0);
    else if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
      const parts: Buffer[] = [];
      let at = 0;
      for (;;) {
        const eol = rest.indexOf(CRLF, at);
        if (eol < 0) break;
        const size = parseInt(rest.subarray(at, eol).toString('latin1'), 16);
        if (size === 0) {
          const fin = rest.indexOf(CRLF, eol + 2);
          if (fin < 0) break;
          body = Buffer.concat(parts);
          rest = rest.subarray(fin + 2);
          break;
        }
        if (rest.length < eol + 2 + size + 2) break;
        parts.push(rest.subarray(eol + 2, eol + 2 + size));
        at = eol + 2 + size + 2;
      }
    } else if (headers['content-length'] !== undefined) {
      const n = Number(headers['content-length']);
      if (rest.length >= n) {
        body = rest.subarray(0, n);
        rest = rest.subarray(n);
      }
    } else if (eof) {
      body = rest;
      rest = Buffer.alloc(0);
    }
    if (body === undefined) break;
    done.push({ status, headers, rawHeaders, body: body.toString('utf8') });
    buf = rest;
    if (status === 101) break;
  }
  return { done, rest: buf };
}

/**
 * Writes `bytes` on a new connection to 127.0.0.1:`port` and collects answers until `expect` of them arrived or
 * the server closed. Bounded: rejects after `timeoutMs` with what it has.
 */
export function rawExchange(
  port: number,
  bytes: string | Buffer,
  expect = 1,
  timeoutMs = 30_000,
): Promise<RawExchange> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    let buf: Buffer = Buffer.alloc(0);
    const responses: RawResponse[] = [];
    let finished = false;
    const finish = (closed: boolean) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ responses, closed });
    };
    const timer = setTimeout(() => {
      if (finished) return;
      finished = true;
      sock.destroy();
      reject(
        new Error(`${responses.length}/${expect} answers within ${timeoutMs} ms: ${buf.toString('latin1')}`),
      );
    }, timeoutMs);
    sock.on('data', (c: Buffer) => {
      const parsed = parse(Buffer.concat([buf, c]), false);
      buf = parsed.rest;
      responses.push(...parsed.done);
      if (responses.length >= expect && expect > 0) finish(false);
    });
    sock.on('end', () => {
      responses.push(...parse(buf, true).done);
      finish(true);
    });
    sock.on('error', () => finish(true));
    sock.write(bytes);
  });
}

/** Writes `bytes`, half-closes, and resolves once the server has closed the connection too. */
export function sendThenHangUp(port: number, bytes: string | Buffer, timeoutMs = 30_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    let got = '';
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`the server kept the connection open for ${timeoutMs} ms`));
    }, timeoutMs);
    sock.on('data', (c: Buffer) => (got += c.toString('latin1')));
    sock.on('error', () => {});
    sock.on('close', () => {
      clearTimeout(timer);
      resolve(got);
    });
    sock.end(bytes);
  });
}
