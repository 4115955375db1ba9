// Helpers of the security tests: exact-bytes HTTP exchanges, the documented error shape, and a picture of what
// a node has stored (to show an attack changed nothing).
import { connect } from 'node:net';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { TestServer } from '../e2e/harness.js';

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
  /** Everything the server sent, as text. */
  raw: string;
}

/** Undoes `Transfer-Encoding: chunked` (enough for answers of this server). */
function unchunk(text: string): string {
  let out = '';
  let rest = text;
  for (;;) {
    const eol = rest.indexOf('\r\n');
    if (eol < 0) return out;
    const size = parseInt(rest.slice(0, eol), 16);
    if (!Number.isFinite(size) || size === 0) return out;
    out += rest.slice(eol + 2, eol + 2 + size);
    rest = rest.slice(eol + 2 + size + 2);
  }
}

/**
 * Sends `bytes` as they are on a new connection and reads the first answer (the server closes after it or the
 * request says `Connection: close`). Bounded: rejects when nothing complete arrived within `timeoutMs`.
 */
export function rawExchange(port: number, bytes: string | Buffer, timeoutMs = 15_000): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      sock.destroy();
      reject(
        new Error(
          `no complete answer within ${timeoutMs} ms to ${JSON.stringify(String(bytes).slice(0, 200))}`,
        ),
      );
    }, timeoutMs);
    const finish = () => {
      clearTimeout(timer);
      const raw = Buffer.concat(chunks).toString('latin1');
      const end = raw.indexOf('\r\n\r\n');
      if (end < 0) return reject(new Error(`no HTTP answer, got ${JSON.stringify(raw.slice(0, 200))}`));
      const lines = raw.slice(0, end).split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      let body = Buffer.from(raw.slice(end + 4), 'latin1').toString('utf8');
      if (/chunked/i.test(headers['transfer-encoding'] ?? '')) body = unchunk(body);
      else if (headers['content-length'] !== undefined)
        body = Buffer.from(raw.slice(end + 4), 'latin1')
          .subarray(0, Number(headers['content-length']))
          .toString('utf8');
      resolve({ status: Number(lines[0]!.split(' ')[1]), headers, body, raw });
    };
    sock.on('data', (c: Buffer) => chunks.push(c));
    sock.on('error', (e) => {
      // A reset after the answer arrived still leaves a complete answer to read.
      if (chunks.length) finish();
      else {
        clearTimeout(timer);
        reject(e);
      }
    });
    sock.on('end', finish);
    sock.write(bytes);
  });
}

/** A request head (+ body) with CRLFs; `Connection: close` is added so the exchange ends after one answer. */
export function httpRequest(requestLine: string, headers: string[], body = ''): string {
  const lines = [requestLine, 'Host: 127.0.0.1', ...headers, 'Connection: close'];
  if (body && !headers.some((h) => /^content-length:/i.test(h)))
    lines.push(`Content-Length: ${Buffer.byteLength(body)}`);
  return lines.join('\r\n') + '\r\n\r\n' + body;
}

/** The documented error answer: JSON `{"code": <status>, "message": "<non-empty>"}`. */
export function expectErrorShape(
  a: { status: number; headers: Record<string, string>; body: string },
  status?: number,
): void {
  if (status !== undefined) expect(a.status, a.body).toBe(status);
  expect(a.headers['content-type'], `content type of ${a.status} ${a.body}`).toMatch(/^application\/json/);
  let parsed: unknown;
  expect(() => (parsed = JSON.parse(a.body)), a.body).not.toThrow();
  expect(parsed, a.body).toEqual({ code: a.status, message: expect.any(String) });
  expect((parsed as { message: string }).message.length).toBeGreaterThan(0);
}

/** `/health` still answers: the server is up and serving. */
export async function expectHealthy(server: TestServer): Promise<void> {
  const r = await rawExchange(server.port, httpRequest('GET /health HTTP/1.1', []));
  expect(r.status).toBe(204);
}

/** What the node has stored and would hand out: sandboxes, templates, snapshots, uploaded build files. */
export async function storedState(server: TestServer): Promise<unknown> {
  const sandboxes = await server.api('GET', '/v2/sandboxes');
  const templates = await server.api('GET', '/templates');
  const snapshots = await server.api('GET', '/snapshots');
  expect([sandboxes.status, templates.status, snapshots.status]).toEqual([200, 200, 200]);
  let files: string[] = [];
  try {
    files = readdirSync(join(server.home, 'template-files')).sort();
  } catch {
    // no uploads yet
  }
  return {
    sandboxes: (sandboxes.body as Record<string, unknown>[])
      .map((s) => ({ id: s.sandboxID, state: s.state, endAt: s.endAt, metadata: s.metadata }))
      .sort((a, b) => String(a.id).localeCompare(String(b.id))),
    templates: (templates.body as Record<string, unknown>[])
      .map((t) => ({ id: t.templateID, names: t.names, status: t.buildStatus, updatedAt: t.updatedAt }))
      .sort((a, b) => String(a.id).localeCompare(String(b.id))),
    snapshots: snapshots.body,
    files,
  };
}
