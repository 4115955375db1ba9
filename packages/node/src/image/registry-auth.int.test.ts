// Authenticated registries: Debian docker-registry with htpasswd (bcrypt, Basic challenge) and with token
// auth (Bearer challenge → a token server on loopback that issues ES256 JWTs).

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ImageError } from './errors.js';
import { startHarness, type Harness } from './testing/harness.js';
import { buildImage } from './testing/oci-builder.js';
import {
  basicAuthHeader,
  pushImage,
  startRegistry,
  TEST_PASSWORD,
  TEST_USER,
  type TestRegistry,
} from './testing/registry.js';
import { fetchToken, startTokenServer, type TokenServer } from './testing/token-server.js';

const img = buildImage({ layers: [{ entries: [{ name: 'secret.txt', content: 'private image' }] }] });
const harnesses: Harness[] = [];

async function harness(registry: string, extra: Parameters<typeof startHarness>[0] = {}): Promise<Harness> {
  const h = await startHarness({ insecureRegistries: [registry], ...extra });
  harnesses.push(h);
  return h;
}

function dockerConfig(dir: string, registry: string, password = TEST_PASSWORD): string {
  const cfgDir = join(dir, 'docker-config');
  mkdirSync(cfgDir, { recursive: true });
  writeFileSync(
    join(cfgDir, 'config.json'),
    JSON.stringify({
      auths: {
        [`http://${registry}/v2/`]: { auth: Buffer.from(`${TEST_USER}:${password}`).toString('base64') },
      },
    }),
  );
  return cfgDir;
}

async function pullError(p: Promise<unknown>): Promise<ImageError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof ImageError) return e;
    throw e;
  }
  throw new Error('expected the pull to fail');
}

afterAll(async () => {
  for (const h of harnesses) await h.close();
});

describe('htpasswd (Basic) registry', () => {
  let reg: TestRegistry;
  beforeAll(async () => {
    reg = await startRegistry({ auth: 'htpasswd' });
    await pushImage(reg.url, 'private/app', 'v1', img, basicAuthHeader());
  });
  afterAll(async () => {
    await reg?.stop();
  });

  it('anonymous → Unauthorized (user error)', async () => {
    const h = await harness(reg.host);
    const e = await pullError(h.service.pull(`${reg.host}/private/app:v1`));
    expect(e.reason).toBe('Unauthorized');
    expect(e.userError).toBe(true);
    expect(e.message).toMatch(/requires a login/);
  });

  it('credentials from $DOCKER_CONFIG/config.json', async () => {
    const h = await harness(reg.host);
    await h.service.stop();
    const svc = await h.restart({ dockerConfigDir: dockerConfig(h.dir, reg.host) });
    const pulled = await svc.pull(`${reg.host}/private/app:v1`);
    expect(pulled.manifestDigest).toBe(img.manifest.digest);
  });

  it('per-pull credentials; a wrong password → Unauthorized', async () => {
    const h = await harness(reg.host);
    const wrong = await pullError(
      h.service.pull(`${reg.host}/private/app:v1`, {
        credentials: { username: TEST_USER, password: 'nope' },
      }),
    );
    expect(wrong.reason).toBe('Unauthorized');
    expect(wrong.message).toMatch(/with the given credentials/);
    const ok = await h.service.pull(`${reg.host}/private/app:v1`, {
      credentials: { username: TEST_USER, password: TEST_PASSWORD },
    });
    expect(ok.manifestDigest).toBe(img.manifest.digest);
  });
});

describe('token (Bearer) registry', () => {
  let reg: TestRegistry;
  let tokens: TokenServer;
  beforeAll(async () => {
    tokens = await startTokenServer();
    reg = await startRegistry({ auth: { token: tokens.config } });
    const token = await fetchToken(tokens, 'private/app');
    await pushImage(reg.url, 'private/app', 'v1', img, { authorization: `Bearer ${token}` });
  });
  afterAll(async () => {
    await reg?.stop();
    await tokens?.stop();
  });

  // The token server is plain HTTP on another port: it must be listed as insecure like the registry.
  const tokenHost = () => new URL(tokens.config.realm).host;

  it('a plain-HTTP token realm that is not listed in insecure_registries is refused', async () => {
    const h = await harness(reg.host);
    const before = tokens.stats.refused + tokens.stats.issued;
    const e = await pullError(h.service.pull(`${reg.host}/private/app:v1`));
    expect(e.reason).toBe('Unauthorized');
    expect(e.message).toMatch(/not HTTPS/);
    expect(tokens.stats.refused + tokens.stats.issued).toBe(before);
  });

  it('anonymous → the token endpoint refuses → Unauthorized', async () => {
    const h = await harness(reg.host, { insecureRegistries: [reg.host, tokenHost()] });
    const refusedBefore = tokens.stats.refused;
    const e = await pullError(h.service.pull(`${reg.host}/private/app:v1`));
    expect(e.reason).toBe('Unauthorized');
    expect(e.message).toMatch(/token endpoint refused anonymous access/);
    expect(tokens.stats.refused).toBe(refusedBefore + 1);
  });

  it('challenge → token with docker config credentials → pull', async () => {
    const h = await harness(reg.host, { insecureRegistries: [reg.host, tokenHost()] });
    const svc = await h.restart({ dockerConfigDir: dockerConfig(h.dir, reg.host) });
    const issuedBefore = tokens.stats.issued;
    const pulled = await svc.pull(`${reg.host}/private/app:v1`);
    expect(pulled.manifestDigest).toBe(img.manifest.digest);
    // One token for the repository, reused for the manifest, config and layer requests.
    expect(tokens.stats.issued).toBe(issuedBefore + 1);
  });
});
