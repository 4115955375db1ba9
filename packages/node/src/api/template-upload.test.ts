import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { request, createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { TemplateFileStore } from '../template/file-store.js';
import { TemplateUploadEndpoint } from './template-upload.js';

const HASH = 'c'.repeat(64);
const dirs: string[] = [];
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'tupload-'));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function newStore(max = 1024 * 1024): Promise<TemplateFileStore> {
  const s = new TemplateFileStore({ dir: tmp(), secret: 'k', maxUploadBytes: max });
  await s.init();
  return s;
}

/** A real tar.gz of a small context dir, as the SDK uploads it. */
function archive(): Buffer {
  const ctx = tmp();
  writeFileSync(join(ctx, 'hello.txt'), 'hello\n');
  mkdirSync(join(ctx, 'dir'));
  writeFileSync(join(ctx, 'dir', 'a.txt'), 'a\n');
  const out = join(tmp(), 'up.tar');
  execFileSync('tar', ['-czf', out, '-C', ctx, ...readdirSync(ctx)]);
  return readFileSync(out);
}

describe('upload endpoint', () => {
  let server: Server | undefined;
  afterEach(async () => {
    await new Promise((r) => server?.close(r) ?? r(undefined));
    server = undefined;
  });

  async function serve(s: TemplateFileStore): Promise<string> {
    const ep = new TemplateUploadEndpoint(s, { info() {}, warn() {}, error() {}, debug() {} } as never);
    server = createServer((req, res) => {
      if (ep.claims(req)) ep.handle(req, res);
      else res.writeHead(418).end();
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(server!.address() as { port: number }).port}`;
  }

  function put(url: string, body: Buffer, method = 'PUT'): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const req = request(url, { method, headers: { 'content-length': String(body.length) } }, (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, body: text }));
      });
      req.on('error', reject);
      req.end(body);
    });
  }

  it('accepts a signed upload without an API key and refuses bad links', async () => {
    const s = await newStore();
    const base = await serve(s);
    const gz = archive();
    const path = `/templates/tpl-1/files/${HASH}/upload`;
    expect((await put(`${base}${path}?token=${s.uploadToken('tpl-2', HASH)}`, gz)).status).toBe(403);
    expect((await put(`${base}${path}?token=${s.uploadToken('tpl-1', HASH)}`, gz, 'POST')).status).toBe(405);
    const bad = await put(`${base}${path}?token=${s.uploadToken('tpl-1', HASH)}`, Buffer.from('nope'));
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.body)).toMatchObject({ code: 400 });
    const ok = await put(`${base}${path}?token=${s.uploadToken('tpl-1', HASH)}`, gz);
    expect(ok).toEqual({ status: 200, body: '' });
    expect(s.hasSync(HASH)).toBe(true);
    expect((await put(`${base}/templates/tpl-1/files/${HASH}`, gz)).status).toBe(418);
  });

  it('lets a client still sending a refused upload finish and read its 413 (no reset mid-body)', async () => {
    const s = await newStore(16);
    const base = await serve(s);
    const path = `/templates/tpl-1/files/${HASH}/upload?token=${s.uploadToken('tpl-1', HASH)}`;
    // Far more than the socket buffers hold: the refusal comes while the client is still writing. A server that
    // closed at once reset the connection under the client's write (EPIPE or ECONNRESET), sometimes before the
    // client had read the answer (the CLI's build then failed with "write EPIPE" instead of the 413).
    for (let i = 0; i < 5; i++) {
      const outcome = await new Promise<{ status?: number; error?: string }>((resolve) => {
        let status: number | undefined;
        const req = request(
          `${base}${path}`,
          { method: 'PUT', headers: { 'content-length': String(8 * 1024 * 1024) } },
          (res) => {
            status = res.statusCode;
            res.resume();
          },
        );
        req.on('error', (e) => resolve({ error: e.message }));
        req.on('close', () => setTimeout(() => resolve({ status }), 20));
        req.end(Buffer.alloc(8 * 1024 * 1024));
      });
      expect(outcome).toEqual({ status: 413 });
    }
  });

  it("answers an upload over the limit with the store's too-large kind as a 413", async () => {
    const s = await newStore(16);
    const base = await serve(s);
    const path = `/templates/tpl-1/files/${HASH}/upload?token=${s.uploadToken('tpl-1', HASH)}`;
    const big = await put(`${base}${path}`, Buffer.alloc(64));
    expect(big.status).toBe(413);
    expect(JSON.parse(big.body)).toEqual({
      code: 413,
      message: 'upload of 64 bytes is larger than the limit of 16',
    });
  });
});
