// Egress policy and isolation, against a fake internet in a namespace on this machine (documentation-range
// addresses; no packet leaves the host). The server listens on 0.0.0.0 so "the sandbox cannot reach the API"
// is a policy decision, not an unbound address.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommandExitError, Sandbox } from 'e2b';
import { REPO, eventually, proxyFetch } from './harness.js';
import { describeNode } from './fixture.js';
import {
  HOST_WAN_IP,
  METADATA_IP,
  WAN_A,
  WAN_B,
  WAN_PORT,
  startFakeInternet,
  type FakeInternet,
} from './fixtures/fake-internet.js';

interface Probe {
  /** curl's exit code: 0 answered, 7 refused, 28 timed out. */
  exit: number;
  body: string;
}

/** GETs `url` from inside the sandbox with curl (bounded: 3 s to connect, 5 s in all). */
async function probe(sbx: Sandbox, url: string): Promise<Probe> {
  try {
    const r = await sbx.commands.run(`curl -sS --connect-timeout 3 -m 5 ${url}`);
    return { exit: 0, body: r.stdout };
  } catch (e) {
    if (e instanceof CommandExitError) return { exit: e.exitCode, body: e.stderr };
    throw e;
  }
}

const wan = (ip: string) => `http://${ip}:${WAN_PORT}/`;
const REFUSED = { exit: 7, body: expect.stringMatching(/Connection refused|Failed to connect/) };

describe('egress policy and isolation', () => {
  let net: FakeInternet;
  let sbx: Sandbox;

  // Registered before the node: runs after its teardown.
  afterAll(async () => {
    await net?.close();
  });
  const { server } = describeNode({ name: 'net', listenHost: '0.0.0.0' });
  beforeAll(async () => {
    net = await startFakeInternet(server.cidrs);
    sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { suite: 'net' } });
  });

  it('allows egress by default, masqueraded behind the host address', async () => {
    expect(await probe(sbx, wan(WAN_A))).toEqual({ exit: 0, body: `wan-a:peer=${HOST_WAN_IP}` });
    expect(await probe(sbx, wan(WAN_B))).toEqual({ exit: 0, body: `wan-b:peer=${HOST_WAN_IP}` });
  });

  it('rejects denyOut CIDRs given at create', async () => {
    const denied = await Sandbox.create({ timeoutMs: 120_000, network: { denyOut: ['198.51.100.0/24'] } });
    try {
      expect(await probe(denied, wan(WAN_A))).toEqual(REFUSED);
      expect(await probe(denied, wan(WAN_B))).toEqual(REFUSED);
      expect((await denied.getInfo()).network?.denyOut).toEqual(['198.51.100.0/24']);
    } finally {
      await denied.kill();
    }
  });

  it('treats allowOut as an allowlist with allow_internet_access: false', async () => {
    const only = await Sandbox.create({
      timeoutMs: 120_000,
      allowInternetAccess: false,
      network: { allowOut: [WAN_A] },
    });
    try {
      expect((await probe(only, wan(WAN_A))).exit).toBe(0);
      expect(await probe(only, wan(WAN_B))).toEqual(REFUSED);
      const info = await server.api('GET', `/sandboxes/${only.sandboxId}`);
      expect(info.body.allowInternetAccess).toBe(false);
      expect(info.body.network.allowOut).toEqual([`${WAN_A}/32`]);
    } finally {
      await only.kill();
    }
  });

  it('changes the rules of a running sandbox with PUT /sandboxes/{id}/network', async () => {
    await sbx.updateNetwork({ denyOut: [WAN_B] });
    expect((await probe(sbx, wan(WAN_A))).exit).toBe(0);
    expect(await probe(sbx, wan(WAN_B))).toEqual(REFUSED);

    const put = await server.api('PUT', `/sandboxes/${sbx.sandboxId}/network`, {
      allow_internet_access: false,
      allowOut: [WAN_B],
    });
    expect(put.status).toBe(204);
    expect(await probe(sbx, wan(WAN_A))).toEqual(REFUSED);
    expect((await probe(sbx, wan(WAN_B))).exit).toBe(0);

    // allowOut alone does not restrict anything.
    await sbx.updateNetwork({ allowOut: [WAN_B] });
    expect((await probe(sbx, wan(WAN_A))).exit).toBe(0);

    const bad = await server.api('PUT', `/sandboxes/${sbx.sandboxId}/network`, { denyOut: ['not-an-ip'] });
    expect(bad.status).toBe(400);
    // A rejected update leaves the rules as they were.
    expect((await probe(sbx, wan(WAN_A))).exit).toBe(0);

    await sbx.updateNetwork({});
    expect((await probe(sbx, wan(WAN_B))).exit).toBe(0);
  });

  it('cannot reach the server API port, which other hosts can reach', async () => {
    // The API listens on 0.0.0.0: reachable from the fake internet through the host's address there...
    const fromWan = net.exec('curl', [
      '-s',
      '-o',
      '/dev/null',
      '-w',
      '%{http_code}',
      `http://${HOST_WAN_IP}:${server.port}/health`,
    ]);
    expect(fromWan).toBe('204');
    // ...and from the host on its sandbox-facing veth address, but never from a sandbox.
    const gw = (await sbx.commands.run("ip -4 route show default | awk '{print $3}'")).stdout.trim();
    expect(gw).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    const fromHost = await fetch(`http://${gw}:${server.port}/health`);
    expect(fromHost.status).toBe(204);
    expect(await probe(sbx, `http://${gw}:${server.port}/health`)).toEqual(REFUSED);
    expect(await probe(sbx, `http://${HOST_WAN_IP}:${server.port}/health`)).toEqual(REFUSED);
    // Nor any other host port through the gateway (e.g. sshd or the API on another address).
    expect(await probe(sbx, `http://${gw}:22/`)).toEqual(REFUSED);
  });

  it('cannot reach another sandbox, which the proxy can', async () => {
    const other = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      await other.files.write(
        '/tmp/upstream.py',
        readFileSync(join(REPO, 'test/e2e/fixtures/upstream.py'), 'utf8'),
      );
      await other.commands.run('python3 /tmp/upstream.py 8080', { background: true, timeoutMs: 0 });
      await eventually(
        async () => (await proxyFetch(server, other.sandboxId, 8080, '/echo')).status === 200,
        'the other sandbox service',
        100,
        100,
      );
      const addrs = (
        await other.commands.run('ip -4 -o addr show | awk \'$2 != "lo" || $4 !~ /^127/ {print $4}\'')
      ).stdout
        .split('\n')
        .filter(Boolean)
        .map((a) => a.split('/')[0]!);
      expect(addrs.length).toBeGreaterThanOrEqual(2);
      for (const a of addrs) expect(await probe(sbx, `http://${a}:8080/echo`), a).toEqual(REFUSED);
    } finally {
      await other.kill();
    }
  });

  it('cannot reach the metadata address, even when allowOut names it', async () => {
    // Policy routing would deliver it to the decoy in the fake internet: only the policy stops it.
    const route = (await sbx.commands.run('ip -4 route get 169.254.169.254')).stdout;
    expect(route).toMatch(/via/);
    expect(await probe(sbx, `http://${METADATA_IP}/`)).toEqual(REFUSED);
    await sbx.updateNetwork({ allowOut: [`${METADATA_IP}/32`] });
    try {
      expect(await probe(sbx, `http://${METADATA_IP}/`)).toEqual(REFUSED);
    } finally {
      await sbx.updateNetwork({});
    }
  });
});
