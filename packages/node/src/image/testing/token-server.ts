// A minimal Docker token server on loopback for integration tests: checks Basic credentials and issues ES256
// JWTs (x5c header) that docker-registry's `auth: token` verifies against a self-signed certificate.
// Not used by the server itself.

import { execFileSync } from 'node:child_process';
import { createPrivateKey, randomUUID, sign, X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TEST_PASSWORD, TEST_USER, type TokenAuthConfig } from './registry.js';

export interface TokenServer {
  config: TokenAuthConfig;
  /** Token requests served, by outcome. */
  stats: { issued: number; refused: number };
  stop(): Promise<void>;
}

const b64url = (b: Buffer | string): string => Buffer.from(b).toString('base64url');

export async function startTokenServer(): Promise<TokenServer> {
  const dir = mkdtempSync(join(tmpdir(), 'aenv-token-'));
  const keyPath = join(dir, 'key.pem');
  const certPath = join(dir, 'cert.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      keyPath,
      '-out',
      certPath,
      '-days',
      '2',
      '-subj',
      '/CN=aenv-test-token',
    ],
    { stdio: 'ignore' },
  );
  const key = createPrivateKey(readFileSync(keyPath));
  const certDer = new X509Certificate(readFileSync(certPath)).raw;
  const service = 'aenv-test-registry';
  const issuer = 'aenv-test-issuer';
  const stats = { issued: 0, refused: 0 };

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const expected = `Basic ${Buffer.from(`${TEST_USER}:${TEST_PASSWORD}`).toString('base64')}`;
    if (req.headers.authorization !== expected) {
      stats.refused++;
      res.writeHead(401).end('{"details":"bad credentials"}');
      return;
    }
    const access = url.searchParams.getAll('scope').map((s) => {
      const [type, name, actions] = s.split(':');
      return { type, name, actions: (actions ?? '').split(',').filter(Boolean) };
    });
    const now = Math.floor(Date.now() / 1000);
    const header = { typ: 'JWT', alg: 'ES256', x5c: [certDer.toString('base64')] };
    const claims = {
      iss: issuer,
      sub: TEST_USER,
      aud: service,
      exp: now + 300,
      nbf: now - 10,
      iat: now,
      jti: randomUUID(),
      access,
    };
    const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
    const sig = sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' });
    stats.issued++;
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ token: `${input}.${b64url(sig)}`, expires_in: 300 }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    config: { realm: `http://127.0.0.1:${port}/token`, service, issuer, rootCertBundle: certPath },
    stats,
    stop: async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A bearer token for pushing (the test's own push client skips the challenge dance). */
export async function fetchToken(ts: TokenServer, repo: string): Promise<string> {
  const u = new URL(ts.config.realm);
  u.searchParams.set('service', ts.config.service);
  u.searchParams.set('scope', `repository:${repo}:pull,push`);
  const res = await fetch(u, {
    headers: { authorization: `Basic ${Buffer.from(`${TEST_USER}:${TEST_PASSWORD}`).toString('base64')}` },
  });
  if (!res.ok) throw new Error(`token: HTTP ${res.status}`);
  return ((await res.json()) as { token: string }).token;
}
