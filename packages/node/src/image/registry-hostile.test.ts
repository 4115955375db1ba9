// The registry client against a hostile registry on loopback: plain-HTTP redirects and token realms only to hosts
// configured as insecure, a bounded number of redirects, and registry error bodies kept out of error messages.

import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ImageError } from './errors.js';
import { RegistryClient } from './registry-client.js';
import { redirectTo, startHostileRegistry, type HostileRegistry } from './testing/hostile-registry.js';
import { buildImage } from './testing/oci-builder.js';

const img = buildImage({ layers: [{ entries: [{ name: 'a.txt', content: 'a' }] }] });
const SECRET_BODY = 'internal-detail-8c1f: /srv/registry/data owned by svc-registry';

let reg: HostileRegistry;
/** A second loopback server standing in for a host the attacker wants the node to call (never insecure). */
let bait: HostileRegistry;
const logged: { obj: object; msg?: string }[] = [];
let client: RegistryClient;

beforeAll(async () => {
  reg = await startHostileRegistry();
  bait = await startHostileRegistry();
  reg.serve('ok/app', 'v1', img);
  client = new RegistryClient({
    insecureRegistries: [reg.host],
    retry: { retries: 2, baseDelayMs: 1, maxDelayMs: 5 },
    logger: { debug: () => {}, warn: (obj, msg) => void logged.push({ obj, ...(msg ? { msg } : {}) }) },
  });
});

afterAll(async () => {
  await client?.close();
  await reg?.stop();
  await bait?.stop();
});

async function manifestError(repo: string): Promise<ImageError> {
  const e = await client.getManifest({ registry: reg.host, repository: repo }, 'v1').then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(ImageError);
  return e as ImageError;
}

const baitHits = () => bait.hits.length;

describe('redirects', () => {
  it('follows a redirect within the insecure registry itself', async () => {
    reg.override(/^\/v2\/self\/app\/manifests\/v1$/, redirectTo(`/v2/ok/app/manifests/v1`));
    const m = await client.getManifest({ registry: reg.host, repository: 'self/app' }, 'v1');
    expect(m.digest).toBe(img.manifest.digest);
  });

  it('refuses a redirect to plain HTTP on a host that is not an insecure registry', async () => {
    bait.serve('ok/app', 'v1', img);
    const before = baitHits();
    for (const [i, status] of [301, 302, 303, 307, 308].entries()) {
      reg.override(
        new RegExp(`^/v2/to-http-${i}/app/manifests/v1$`),
        redirectTo(`${bait.url}/v2/ok/app/manifests/v1`, status),
      );
      const e = await manifestError(`to-http-${i}/app`);
      expect(e.message).toMatch(/refusing a redirect to plain HTTP/);
    }
    expect(baitHits()).toBe(before);
  });

  it('refuses redirects to other schemes and invalid locations', async () => {
    for (const [i, location] of ['file:///etc/shadow', 'gopher://127.0.0.1/', 'http://[::1'].entries()) {
      reg.override(new RegExp(`^/v2/scheme-${i}/app/manifests/v1$`), redirectTo(location));
      const e = await manifestError(`scheme-${i}/app`);
      expect(e.message).toMatch(/redirect/);
      expect(e.message).not.toContain('/etc/shadow');
    }
  });

  it('stops after 5 redirects (a registry redirecting 20 times, or forever)', async () => {
    let n = 0;
    reg.override(/^\/v2\/loop\/app\/manifests\//, (_req, res) => {
      n++;
      res.writeHead(302, { location: `/v2/loop/app/manifests/hop${n}` }).end();
    });
    const e = await manifestError('loop/app');
    expect(e.message).toMatch(/more than 5 redirects/);
    expect(n).toBe(6); // the first request and 5 redirects, no retry of a permanent failure
  });
});

describe('token realms', () => {
  const challenge = (realm: string) => (_req: unknown, res: ServerResponse) =>
    void res
      .writeHead(401, { 'www-authenticate': `Bearer realm="${realm}",service="x",scope="repository:a:pull"` })
      .end();

  it('refuses a realm over plain HTTP on a host that is not an insecure registry, without calling it', async () => {
    const before = baitHits();
    reg.override(/^\/v2\/realm-http\/app\/manifests\/v1$/, challenge(`${bait.url}/token`));
    const e = await manifestError('realm-http/app');
    expect(e.reason).toBe('Unauthorized');
    expect(e.message).toMatch(/not HTTPS/);
    expect(baitHits()).toBe(before);
  });

  it('refuses realms with other schemes', async () => {
    for (const [i, realm] of ['file:///etc/shadow', 'ftp://127.0.0.1/t', 'not a url'].entries()) {
      reg.override(new RegExp(`^/v2/realm-scheme-${i}/app/manifests/v1$`), challenge(realm));
      const e = await manifestError(`realm-scheme-${i}/app`);
      expect(e.reason).toBe('Unauthorized');
      expect(e.message).not.toContain('/etc/shadow');
    }
  });

  it('accepts a realm on the insecure registry itself', async () => {
    let authorized = 0;
    reg.override(/^\/token$/, (_req, res) => void res.writeHead(200).end('{"token":"t0k","expires_in":60}'));
    reg.override(/^\/v2\/realm-self\/app\/manifests\/v1$/, (req, res) => {
      if (req.headers.authorization === 'Bearer t0k') {
        authorized++;
        return void res.writeHead(200, { 'content-type': img.manifest.mediaType }).end(img.manifest.data);
      }
      challenge(`${reg.url}/token`)(req, res);
    });
    const m = await client.getManifest({ registry: reg.host, repository: 'realm-self/app' }, 'v1');
    expect(m.digest).toBe(img.manifest.digest);
    expect(authorized).toBe(1);
  });
});

describe('error bodies', () => {
  it('are logged, never put in the error message', async () => {
    const bodies: [number, string][] = [
      [404, JSON.stringify({ errors: [{ code: 'MANIFEST_UNKNOWN', message: SECRET_BODY }] })],
      [403, SECRET_BODY],
      [400, `<html>${SECRET_BODY}</html>`],
      [500, JSON.stringify({ errors: [{ code: 'X', message: SECRET_BODY }] })],
    ];
    for (const [i, [status, body]] of bodies.entries()) {
      reg.override(
        new RegExp(`^/v2/body-${i}/app/manifests/v1$`),
        (_req, res) => void res.writeHead(status, { 'content-type': 'application/json' }).end(body),
      );
      const e = await manifestError(`body-${i}/app`);
      expect(e.message, `HTTP ${status}`).not.toContain('internal-detail');
      expect(e.message).toContain(`body-${i}/app`);
    }
    expect(JSON.stringify(logged)).toContain('internal-detail-8c1f');
  });
});
