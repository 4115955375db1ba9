// A real Debian `docker-registry` on a free loopback port with private storage, for integration tests and
// benchmarks; optional htpasswd (bcrypt) or token authentication. Plus a minimal push client (monolithic
// uploads) and helpers to tamper with stored blobs. Not used by the server itself.

import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { blobsOf, type Blob, type BuiltImage, type BuiltIndex } from './oci-builder.js';

/** bcrypt of TEST_PASSWORD (generated offline with libxcrypt: perl -e 'print crypt(...)'). */
export const TEST_USER = 'aenv';
export const TEST_PASSWORD = 'aenv-test-secret';
const TEST_BCRYPT = '$2b$05$abcdefghijklmnopqrstuuEkMfVV7nzdF0USOWk41PuQCz1PKUts.';

export interface TokenAuthConfig {
  realm: string;
  service: string;
  issuer: string;
  /** PEM file with the certificate that signs tokens. */
  rootCertBundle: string;
}

export interface RegistryOptions {
  auth?: 'htpasswd' | { token: TokenAuthConfig };
}

export interface TestRegistry {
  host: string;
  url: string;
  storageDir: string;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export async function startRegistry(opts: RegistryOptions = {}): Promise<TestRegistry> {
  const dir = mkdtempSync(join(tmpdir(), 'aenv-registry-'));
  const storageDir = join(dir, 'data');
  mkdirSync(storageDir);
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  let auth = '';
  if (opts.auth === 'htpasswd') {
    writeFileSync(join(dir, 'htpasswd'), `${TEST_USER}:${TEST_BCRYPT}\n`);
    auth = `auth:\n  htpasswd:\n    realm: aenv-test\n    path: ${join(dir, 'htpasswd')}\n`;
  } else if (opts.auth) {
    const t = opts.auth.token;
    auth =
      `auth:\n  token:\n    realm: ${t.realm}\n    service: ${t.service}\n    issuer: ${t.issuer}\n` +
      `    rootcertbundle: ${t.rootCertBundle}\n`;
  }
  const config =
    `version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n` +
    `storage:\n  filesystem:\n    rootdirectory: ${storageDir}\n  delete:\n    enabled: true\n` +
    `http:\n  addr: ${host}\n  secret: ${randomBytes(16).toString('hex')}\n` +
    auth;
  writeFileSync(join(dir, 'config.yml'), config);
  const child: ChildProcess = spawn('docker-registry', ['serve', join(dir, 'config.yml')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (b: Buffer) => {
    stderr = (stderr + b.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await Promise.race([exited, sleep(5000)]);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const url = `http://${host}`;
  for (let i = 0; i < 100; i++) {
    if (child.exitCode !== null) break;
    try {
      await fetch(`${url}/v2/`);
      return { host, url, storageDir, stop };
    } catch {
      await sleep(50);
    }
  }
  await stop();
  throw new Error(`docker-registry did not start on ${host}: ${stderr}`);
}

/** Path of a blob in the registry's filesystem storage (for tamper tests). */
export function storedBlobPath(reg: TestRegistry, digest: string): string {
  const hex = digest.slice('sha256:'.length);
  return join(reg.storageDir, 'docker', 'registry', 'v2', 'blobs', 'sha256', hex.slice(0, 2), hex, 'data');
}

async function check(res: Response, what: string, ok: number[]): Promise<Response> {
  if (!ok.includes(res.status)) throw new Error(`${what}: HTTP ${res.status} ${await res.text()}`);
  return res;
}

async function pushBlob(base: string, repo: string, b: Blob, headers: Record<string, string>): Promise<void> {
  const head = await fetch(`${base}/v2/${repo}/blobs/${b.digest}`, { method: 'HEAD', headers });
  if (head.status === 200) return;
  const start = await check(
    await fetch(`${base}/v2/${repo}/blobs/uploads/`, { method: 'POST', headers }),
    `start upload of ${b.digest}`,
    [202],
  );
  const loc = new URL(start.headers.get('location')!, base);
  loc.searchParams.set('digest', b.digest);
  await check(
    await fetch(loc, {
      method: 'PUT',
      headers: { ...headers, 'content-type': 'application/octet-stream' },
      body: b.data,
    }),
    `upload of ${b.digest}`,
    [201],
  );
}

async function pushManifest(
  base: string,
  repo: string,
  ref: string,
  m: Blob,
  headers: Record<string, string>,
): Promise<void> {
  await check(
    await fetch(`${base}/v2/${repo}/manifests/${ref}`, {
      method: 'PUT',
      headers: { ...headers, 'content-type': m.mediaType },
      body: m.data,
    }),
    `push of manifest ${repo}:${ref}`,
    [201],
  );
}

/** Pushes an image or index (all blobs, child manifests by digest, then the top under `tag`). */
export async function pushImage(
  base: string,
  repo: string,
  tag: string,
  item: BuiltImage | BuiltIndex,
  headers: Record<string, string> = {},
): Promise<void> {
  const images = item.kind === 'image' ? [item] : item.images;
  for (const img of images) {
    for (const b of [...img.layers, img.config]) await pushBlob(base, repo, b, headers);
  }
  if (item.kind === 'image') {
    await pushManifest(base, repo, tag, item.manifest, headers);
    return;
  }
  for (const img of images) await pushManifest(base, repo, img.manifest.digest, img.manifest, headers);
  await pushManifest(base, repo, tag, item.index, headers);
}

export function basicAuthHeader(user = TEST_USER, password = TEST_PASSWORD): Record<string, string> {
  return { authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}` };
}

export { blobsOf };
