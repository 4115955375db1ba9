import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { randomBytes, X509Certificate } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, createServer } from 'node:tls';
import { afterAll, describe, expect, it } from 'vitest';
import { loadOrCreateNodeCa, type NodeCa } from './node-ca.js';

const root = mkdtempSync(join(tmpdir(), 'aenv-node-ca-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const home = () => {
  const h = join(root, `h${n++}`);
  mkdirSync(h);
  return h;
};

/** Serves one TLS connection with the CA's leaf for `served`; the client verifies `asked` against the CA. */
async function handshake(ca: NodeCa, served: string, asked: string, trust = ca.certPem): Promise<string> {
  const context = await ca.contextFor(served);
  const server = createServer({ SNICallback: (_n, cb) => cb(null, context) }, (s) => s.end('ok'));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    return await new Promise<string>((resolve, reject) => {
      const c = connect({
        host: '127.0.0.1',
        port: (server.address() as AddressInfo).port,
        servername: asked,
        ca: trust,
      });
      let got = '';
      c.on('data', (b: Buffer) => (got += b.toString()));
      c.on('end', () => resolve(got));
      c.on('error', reject);
    });
  } finally {
    server.close();
  }
}

describe('node egress CA', () => {
  it('is created once as a 0600 managed secret and kept across loads', async () => {
    const h = home();
    const first = await loadOrCreateNodeCa({ homePath: h });
    const path = join(h, 'secrets', 'egress-ca');
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(statSync(join(h, 'secrets')).mode & 0o777).toBe(0o700);
    expect(readFileSync(path, 'utf8')).toContain('BEGIN PRIVATE KEY');
    const again = await loadOrCreateNodeCa({ homePath: h });
    expect(again.certPem).toBe(first.certPem);
    const cert = new X509Certificate(first.certPem);
    expect(cert.ca).toBe(true);
    expect(first.certPem).not.toContain('PRIVATE KEY');
  });

  it('mints leaves for a name that verify against the CA, and only for that name', async () => {
    const ca = await loadOrCreateNodeCa({ homePath: home() });
    expect(await handshake(ca, 'api.example.test', 'api.example.test')).toBe('ok');
    await expect(handshake(ca, 'api.example.test', 'other.example.test')).rejects.toThrow(
      /altnames|Hostname/i,
    );
    // Another node's CA does not vouch for this one's leaves.
    const other = await loadOrCreateNodeCa({ homePath: home() });
    await expect(handshake(ca, 'api.example.test', 'api.example.test', other.certPem)).rejects.toThrow();
  });

  it('caches a leaf per name and re-mints it when it nears its end', async () => {
    let now = Date.now();
    const ca = await loadOrCreateNodeCa({ homePath: home(), now: () => now });
    const a = await ca.contextFor('a.test');
    expect(await ca.contextFor('a.test')).toBe(a);
    expect(await ca.contextFor('b.test')).not.toBe(a);
    now += 7 * 24 * 3600 * 1000;
    expect(await ca.contextFor('a.test')).not.toBe(a);
  });

  it('with the cluster secrets key: the same CA on every node, so a moved sandbox trusts the new node leaves', async () => {
    const key = randomBytes(32);
    const [h1, h2] = [home(), home()];
    const onA = await loadOrCreateNodeCa({ homePath: h1, clusterKey: key });
    const onB = await loadOrCreateNodeCa({ homePath: h2, clusterKey: key });
    // Nothing on disk: the key is the secret.
    expect(() => statSync(join(h1, 'secrets'))).toThrow();
    const [ca, cb] = [new X509Certificate(onA.certPem), new X509Certificate(onB.certPem)];
    expect(cb.subject).toBe(ca.subject);
    expect(cb.serialNumber).toBe(ca.serialNumber);
    expect(cb.publicKey.export({ format: 'jwk' })).toEqual(ca.publicKey.export({ format: 'jwk' }));
    expect(ca.ca).toBe(true);
    expect(ca.subject).toMatch(/aenv egress CA cluster [0-9a-f]{8}/);
    // B's leaf verifies against the certificate A installed in the sandbox, and the other way round.
    expect(await handshake(onB, 'api.example.test', 'api.example.test', onA.certPem)).toBe('ok');
    expect(await handshake(onA, 'api.example.test', 'api.example.test', onB.certPem)).toBe('ok');
    // Another cluster key, another CA; and a node-local CA does not vouch for the cluster's leaves.
    const other = await loadOrCreateNodeCa({ homePath: home(), clusterKey: randomBytes(32) });
    await expect(handshake(onB, 'api.example.test', 'api.example.test', other.certPem)).rejects.toThrow();
    const local = await loadOrCreateNodeCa({ homePath: h1 });
    await expect(handshake(onB, 'api.example.test', 'api.example.test', local.certPem)).rejects.toThrow();
  });

  it('refuses a managed file that is not a key and its own certificate', async () => {
    const keyHome = home();
    await loadOrCreateNodeCa({ homePath: keyHome });
    const key = /-----BEGIN PRIVATE KEY-----[\s\S]+?-----END PRIVATE KEY-----/.exec(
      readFileSync(join(keyHome, 'secrets', 'egress-ca'), 'utf8'),
    )![0];
    const certOfAnother = (await loadOrCreateNodeCa({ homePath: home() })).certPem;
    const h = home();
    mkdirSync(join(h, 'secrets'), { mode: 0o700 });
    writeFileSync(join(h, 'secrets', 'egress-ca'), `${key}\n${certOfAnother}`, { mode: 0o600 });
    await expect(loadOrCreateNodeCa({ homePath: h })).rejects.toThrow(/not the key's/);
    writeFileSync(join(h, 'secrets', 'egress-ca'), certOfAnother, { mode: 0o600 });
    await expect(loadOrCreateNodeCa({ homePath: h })).rejects.toThrow(/must hold a PKCS#8 private key/);
  });
});
