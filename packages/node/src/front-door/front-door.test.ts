import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { newSandboxId } from '@aenv/protocol';
import { TemplateUploadEndpoint } from '../api/template-upload.js';
import { ServerMetrics } from '../observability/metrics.js';
import { SandboxProxy, type ProxyTarget, type SandboxDirectory } from '@aenv/proxy';
import { TemplateFileStore } from '../template/file-store.js';
import { createLogger } from '../util/log.js';
import { nodeDataPlanes } from './data-planes.js';
import { createHttpServer } from './http-server.js';

// The node's front door with its real data plane (the sandbox proxy, template upload links) in front of a
// control plane that records every request it sees, and a sandbox stand-in that records every request
// forwarded to it.

const KEY = 'e2b_' + 'ab'.repeat(32);
const DOMAIN = 'sandboxes.test';
const HASH = 'c'.repeat(64);
const silent = new Writable({ write: (_c, _e, cb) => cb() });
const logger = createLogger('json', 'info', silent);

interface Answer {
  status: number;
  body: string;
}

/** A real tar.gz, as the SDK uploads a COPY context. */
function archive(dir: string): Buffer {
  writeFileSync(join(dir, 'hello.txt'), 'hello\n');
  execFileSync('tar', ['-czf', join(dir, 'up.tar.gz'), '-C', dir, 'hello.txt']);
  return readFileSync(join(dir, 'up.tar.gz'));
}

function send(
  port: number,
  path: string,
  opts: { method?: string; headers?: Record<string, string>; body?: string | Buffer } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path, method: opts.method ?? 'GET', headers: opts.headers ?? {} },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

describe('front door: the ordered data-plane handlers before the control plane', () => {
  const sandboxId = newSandboxId();
  const controlPlaneSaw: string[] = [];
  const sandboxSaw: string[] = [];
  let sandbox: Server;
  let sandboxPort = 0;
  let port = 0;
  let files: TemplateFileStore;
  let dir = '';
  let close: () => Promise<void>;

  beforeAll(async () => {
    sandbox = createServer((req, res) => {
      sandboxSaw.push(`${req.method} ${req.url}`);
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('from the sandbox'));
    });
    await new Promise<void>((r) => sandbox.listen(0, '127.0.0.1', r));
    sandboxPort = (sandbox.address() as AddressInfo).port;

    const target: ProxyTarget = {
      sandboxId,
      state: 'running',
      secure: false,
      allowPublicTraffic: true,
      autoResume: false,
      upstream: { host: '127.0.0.1', instanceId: 'instance-1' },
    };
    const directory: SandboxDirectory = {
      lookup: (id) => (id === sandboxId ? target : undefined),
      settle: async (id) => (id === sandboxId ? target : undefined),
      autoResume: async () => target,
      verifyEnvdToken: () => false,
      verifyTrafficToken: () => false,
      verifyFilesSignature: () => false,
      findBySignedFilesUrl: () => undefined,
    };
    const proxy = new SandboxProxy({
      domains: [DOMAIN],
      envdPort: 49983,
      platformApiKey: KEY,
      directory,
      logger,
    });
    dir = mkdtempSync(join(tmpdir(), 'front-door-'));
    files = new TemplateFileStore({ dir: join(dir, 'files'), secret: 'k', maxUploadBytes: 64 * 1024 });
    await files.init();

    const { app, server } = createHttpServer({
      apiKey: KEY,
      bodyLimitBytes: 1024,
      logger,
      metrics: new ServerMetrics(),
      dataPlanes: nodeDataPlanes({
        sandboxProxy: proxy,
        templateUploads: new TemplateUploadEndpoint(files, logger),
      }),
    });
    app.addHook('onResponse', async (req) => {
      controlPlaneSaw.push(`${req.method} ${req.url}`);
    });
    app.get('/sandboxes', async () => []);
    app.put('/templates/:id/files/:hash/upload', async () => ({ fromControlPlane: true }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (server.address() as AddressInfo).port;
    close = async () => {
      proxy.closeAll();
      await app.close();
    };
  });

  afterAll(async () => {
    await close();
    await new Promise((r) => sandbox.close(r));
    rmSync(dir, { recursive: true, force: true });
  });

  beforeEach(() => {
    controlPlaneSaw.length = 0;
    sandboxSaw.length = 0;
  });

  it('forwards sandbox traffic without the control plane seeing it, whatever its path', async () => {
    const host = `${sandboxPort}-${sandboxId}.${DOMAIN}`;
    const paths = ['/', '/sandboxes', '/health', `/templates/t1/files/${HASH}/upload?token=x`];
    for (const path of paths) {
      const a = await send(port, path, {
        method: path.includes('upload') ? 'PUT' : 'GET',
        headers: { host },
      });
      expect(a).toEqual({ status: 200, body: 'from the sandbox' });
    }
    const viaHeaders = await send(port, '/sandboxes', {
      headers: { 'e2b-sandbox-id': sandboxId, 'e2b-sandbox-port': String(sandboxPort) },
    });
    expect(viaHeaders.body).toBe('from the sandbox');
    expect(sandboxSaw).toHaveLength(paths.length + 1);
    expect(controlPlaneSaw).toEqual([]);
  });

  it('serves an upload link itself: neither forwarded nor seen by the control plane', async () => {
    const token = files.uploadToken('t1', HASH);
    const body = archive(mkdtempSync(join(dir, 'context-')));
    const a = await send(port, `/templates/t1/files/${HASH}/upload?token=${token}`, {
      method: 'PUT',
      headers: { 'content-length': String(body.length) },
      body,
    });
    expect(a.status).toBe(200);
    const bad = await send(port, `/templates/t1/files/${HASH}/upload?token=nope`, { method: 'PUT' });
    expect(bad.status).toBe(403);
    expect(sandboxSaw).toEqual([]);
    expect(controlPlaneSaw).toEqual([]);
  });

  it('gives control-plane requests to the control plane and forwards none of them', async () => {
    const listed = await send(port, '/sandboxes', { headers: { 'x-api-key': KEY } });
    expect(listed).toEqual({ status: 200, body: '[]' });
    const unknown = await send(port, '/no-such-route', { headers: { 'x-api-key': KEY } });
    expect(unknown.status).toBe(404);
    const unauthenticated = await send(port, '/sandboxes');
    expect(unauthenticated.status).toBe(401);
    expect(controlPlaneSaw).toEqual(['GET /sandboxes', 'GET /no-such-route', 'GET /sandboxes']);
    expect(sandboxSaw).toEqual([]);
  });

  it('lets the sandbox proxy answer a bad routing header instead of the control plane', async () => {
    const a = await send(port, '/sandboxes', {
      headers: { 'e2b-sandbox-id': 'not-an-id', 'e2b-sandbox-port': '80' },
    });
    expect(a.status).toBe(400);
    expect(controlPlaneSaw).toEqual([]);
    expect(sandboxSaw).toEqual([]);
  });
});
