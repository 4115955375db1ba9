// /secrets in a cluster (docs/networking.md#secrets-in-a-cluster): one scheduler, two nodes sharing a posix_fs
// repository and the cluster's secrets (AENV_SECRETS_ENCRYPTION_KEY among them), one gateway. A secret made
// through the gateway is served by both nodes, its value never returned; a sandbox whose network rule fills it in
// is paused on A, A dies, the sandbox resumes on B and its requests still carry the header (HTTP, and HTTPS with
// the interception CA it trusted on A). The upstream is a fake internet on this machine (fixtures/fake-internet.ts).
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, Secret } from 'e2b';
import {
  startSchedulerProcess,
  type SchedulerProcess,
} from '../../packages/scheduler/src/testing/scheduler-process.js';
import {
  startGatewayProcess,
  type GatewayProcess,
} from '../../packages/gateway/src/testing/gateway-process.js';
import { endNode, eventually, freePort, REPO, startServer, useSdk, type TestServer } from './harness.js';
import { makeTestCerts, runIn as run } from './fixtures/test-ca.js';
import { startFakeInternet, type FakeInternet } from './fixtures/fake-internet.js';

const KEY = `e2b_${randomBytes(32).toString('hex')}`;
const WEB = '198.51.100.30';
const ECHO = '198.51.100.31';
const DNS = '198.51.100.53';
const V1 = 'sk-cluster-one-5e1d0c';
const V2 = 'sk-cluster-two-93ab47';
const V3 = 'sk-cluster-three-c2f8';

const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { encoding: 'utf8', stdio: 'pipe' });

/** curl with the sandbox's own trust store (no --cacert, no -k). */
const curl = (args: string) => `curl -sS --connect-timeout 3 -m 8 ${args}`;
const authorizationSeen = async (sbx: Sandbox, url: string) => {
  const r = await run(sbx, curl(url));
  expect(r, url).toMatchObject({ exit: 0 });
  return (JSON.parse(r.out) as { authorization: string | null }).authorization;
};

/** Creates its TLS context (reading the trust store) at once, then waits for /tmp/go to make one request. */
const HELD_CLIENT = `
import json, os, ssl, time, urllib.request
ctx = ssl.create_default_context()
open('/tmp/held-ready', 'w').close()
for _ in range(6000):
    if os.path.exists('/tmp/go'):
        break
    time.sleep(0.1)
try:
    body = urllib.request.urlopen('https://api.allowed.test/headers', context=ctx, timeout=8).read()
    out = json.loads(body)['authorization']
except Exception as e:
    out = 'ERR ' + repr(e)
with open('/tmp/held-out.tmp', 'w') as f:
    f.write(out)
os.rename('/tmp/held-out.tmp', '/tmp/held-out')
`;

const dir = mkdtempSync(join(tmpdir(), 'aenv-e2e-csec-'));
const certs = makeTestCerts(dir, 'aenv secrets test CA', ['api.allowed.test', 'other.allowed.test']);

describe('/secrets through aenv gateway and sandboxes that move', () => {
  let sched: SchedulerProcess;
  let gateway: GatewayProcess;
  let a: TestServer;
  let b: TestServer;
  let net: FakeInternet | undefined;
  let hosts: ChildProcess | undefined;
  const shared = `/var/lib/aenv-e2e/csecshared-${randomUUID().slice(0, 8)}`;
  const env = {
    AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: randomBytes(32).toString('hex'),
    AENV_SNAPSHOT_RECORD_SIGNING_SECRET: randomBytes(32).toString('hex'),
    AENV_SECRETS_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
  };
  const gw = (method: string, path: string, body?: unknown, key = KEY) =>
    fetch(gateway.url + path, {
      method,
      headers: {
        ...(key ? { 'x-api-key': key } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
  const answer = async (r: Response) => ({
    status: r.status,
    body: (await r.json()) as Record<string, unknown>,
  });

  const node = (name: string, nodeId: string, port: number) => {
    const home = `/var/lib/aenv-e2e/${name}`;
    mkdirSync(home, { recursive: true, mode: 0o711 });
    mkdirSync(join(home, 'secrets'), { recursive: true, mode: 0o700 });
    writeFileSync(join(home, 'secrets', 'api-key'), `${KEY}\n`, { mode: 0o600 });
    return startServer(
      {
        name,
        env,
        toml: [
          '[snapshot]',
          'repository_backend = "posix_fs"',
          '[backend.posix_fs]',
          `snapshot_store = "${shared}"`,
          '[network.egress]',
          `resolvers = ["${DNS}"]`,
          `upstream_ca_file = "${certs.ca}"`,
          '[network.dns]',
          `nameserver = "${DNS}"`,
          '[cluster]',
          `scheduler_endpoint = "http://${sched.grpcAddress}"`,
          '[observability.scheduler_report]',
          'enabled = true',
          'interval_secs = 1',
          '[node_identity]',
          `node_id = "${nodeId}"`,
        ].join('\n'),
      },
      port,
    );
  };

  beforeAll(async () => {
    mkdirSync('/var/lib/aenv-e2e', { recursive: true, mode: 0o711 });
    mkdirSync(shared, { recursive: true, mode: 0o700 });
    const ports = [await freePort(), await freePort()];
    sched = await startSchedulerProcess({
      scheduler: {
        nodes: [
          { id: 'csec-a', endpoint: `http://127.0.0.1:${ports[0]}` },
          { id: 'csec-b', endpoint: `http://127.0.0.1:${ports[1]}` },
        ],
        report_ttl: '5s',
      },
    });
    gateway = await startGatewayProcess({ scheduler_addr: sched.grpcAddress }, KEY);
    // One after the other: the first registers the base template in the shared repository, the second finds it.
    a = await node('secna', 'csec-a', ports[0]!);
    b = await node('secnb', 'csec-b', ports[1]!);
    await eventually(
      async () => ((await (await gw('GET', '/nodes')).json()) as unknown[]).length === 2,
      'both nodes to heartbeat',
      300,
      100,
    );
    net = await startFakeInternet([a.cidrs, b.cidrs]);
    for (const ip of [WEB, ECHO, DNS]) net.exec('ip', ['addr', 'add', `${ip}/32`, 'dev', 'wan0']);
    for (const ip of [WEB, DNS]) expect(sh('ip', ['route', 'get', ip])).toMatch(/ dev efw\d+ /);
    hosts = spawn(
      'nsenter',
      [
        `--net=${net.netns}`,
        process.execPath,
        join(REPO, 'test/e2e/fixtures/egress-upstream.mjs'),
        JSON.stringify({
          dns: DNS,
          records: { 'api.allowed.test': WEB, 'other.allowed.test': WEB },
          web: WEB,
          echo: ECHO,
          cert: certs.cert,
          key: certs.key,
        }),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    await new Promise<void>((resolve, reject) => {
      let err = '';
      hosts!.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && resolve());
      hosts!.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      hosts!.on('exit', (code) => reject(new Error(`fake internet hosts exited ${code}: ${err}`)));
    });
    // Node homes stay between runs: secrets a failed earlier run left in a node's state.db are published to this
    // repository at the node's first copy. Start from none.
    for (const s of (await (await gw('GET', '/secrets')).json()) as { secretID: string }[])
      expect((await gw('DELETE', `/secrets/${s.secretID}`)).status).toBe(204);
  });
  afterAll(async () => {
    hosts?.kill('SIGKILL');
    await net?.close();
    await gateway?.stop();
    for (const n of [a, b]) if (n) await n.shutdown().catch(() => undefined);
    await sched?.stop();
    rmSync(shared, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  });

  let secretId = '';
  it('a secret made through the gateway is served by both nodes; the value is never returned', async () => {
    const made = await answer(
      await gw('POST', '/secrets', { name: 'upstream-key', value: V1, metadata: { team: 'c' } }),
    );
    expect(made.status).toBe(201);
    expect(made.body).toMatchObject({ name: 'upstream-key', currentVersion: 1, metadata: { team: 'c' } });
    secretId = made.body.secretID as string;
    // The write copied it into both nodes before the gateway answered: each serves it itself.
    for (const n of [a, b]) {
      expect((await n.api('GET', `/secrets/${secretId}`)).body).toEqual(made.body);
      expect((await n.api('GET', '/secrets')).body).toEqual([made.body]);
    }
    // The name is taken cluster-wide, whichever node the gateway picks.
    for (let i = 0; i < 3; i++)
      expect(await answer(await gw('POST', '/secrets', { name: 'Upstream-Key', value: 'x' }))).toEqual({
        status: 409,
        body: { code: 409, message: 'secret upstream-key already exists' },
      });
    const updated = await answer(await gw('POST', `/secrets/${secretId}`, { value: V2 }));
    expect(updated).toMatchObject({ status: 200, body: { currentVersion: 2, metadata: { team: 'c' } } });
    expect((await b.api('GET', '/secrets/upstream-key')).body).toMatchObject({ currentVersion: 2 });

    const answers = [
      made.body,
      updated.body,
      await (await gw('GET', '/secrets')).json(),
      await (await gw('GET', `/secrets/${secretId}`)).json(),
    ];
    expect(JSON.stringify(answers)).not.toMatch(/sk-cluster/);
    // Sealed in the repository: no file of it holds the value.
    const docs = join(shared, 'repository', 'catalog', 'secrets');
    expect(readdirSync(docs)).toEqual([`${secretId}.json`]);
    expect(readFileSync(join(docs, `${secretId}.json`), 'utf8')).not.toMatch(/sk-cluster/);
    for (const n of [a, b]) expect(n.logs()).not.toMatch(/sk-cluster/);
  });

  it('refuses /secrets calls without the key, with bad ids, and unknown secrets, naming the problem', async () => {
    expect((await gw('GET', '/secrets', undefined, '')).status).toBe(401);
    expect((await gw('POST', '/secrets', { name: 'n', value: 'v' }, `e2b_${'0'.repeat(64)}`)).status).toBe(
      401,
    );
    expect((await gw('DELETE', `/secrets/${secretId}`, undefined, '')).status).toBe(401);
    for (const [method, path] of [
      ['GET', '/secrets/..%2Fsandboxes'],
      ['DELETE', '/secrets/name.with.dots'],
      ['POST', `/secrets/${'a'.repeat(129)}`],
      ['GET', '/secrets/sec_nothex'],
    ] as const) {
      const r = await answer(await gw(method, path, method === 'POST' ? { value: 'v' } : undefined));
      expect(r.status, path).toBe(400);
      expect(r.body.message, path).toMatch(/^invalid secret id or name/);
    }
    expect(await answer(await gw('GET', `/secrets/sec_${'0'.repeat(24)}`))).toEqual({
      status: 404,
      body: { code: 404, message: `secret sec_${'0'.repeat(24)} not found` },
    });
    expect((await gw('DELETE', '/secrets/no-such-secret')).status).toBe(404);
    expect((await gw('GET', '/secrets?nextToken=%25%25')).status).toBe(400);
    // The secret is untouched by all of it.
    expect((await b.api('GET', `/secrets/${secretId}`)).body).toMatchObject({ currentVersion: 2 });
  });

  it('a sandbox whose rule fills in the secret, paused on A, resumes on B after A is gone: the header still comes', async () => {
    useSdk(a);
    const rules = {
      'api.allowed.test': [
        { transform: { headers: { Authorization: `Bearer ${Secret.fill('upstream-key')}` } } },
      ],
    };
    let sbx = await Sandbox.create({
      timeoutMs: 600_000,
      network: { allowOut: ['api.allowed.test'], denyOut: ['0.0.0.0/0'], rules },
    });
    expect(await authorizationSeen(sbx, 'http://api.allowed.test/headers')).toBe(`Bearer ${V2}`);
    expect(await authorizationSeen(sbx, 'https://api.allowed.test/headers')).toBe(`Bearer ${V2}`);
    // A process that loaded the trust store on A and makes its request after the move, from memory: what a
    // node-local CA would break (a new process reads the bundle B rewrote at the restore).
    await sbx.files.write('/tmp/held.py', HELD_CLIENT);
    const held = await sbx.commands.run('exec python3 /tmp/held.py', { background: true });
    await held.disconnect(); // no stream may stay open to envd across the pause
    await eventually(
      async () => (await run(sbx, 'cat /tmp/held-ready')).exit === 0,
      'the held client',
      100,
      100,
    );

    const copied = () =>
      a
        .logs()
        .split('\n')
        .filter((l) => l.includes('"paused sandbox copied to the repository"') && l.includes(sbx.sandboxId))
        .length;
    expect((await a.api('POST', `/sandboxes/${sbx.sandboxId}/pause`)).status).toBe(204);
    await eventually(() => copied() > 0, 'the pause to reach the repository', 600, 100);
    await a.crash();

    useSdk(b);
    sbx = await Sandbox.connect(sbx.sandboxId);
    expect(b.logs()).toContain('"took over a sandbox paused on another node"');
    // The policy came along in the record: the rule (its value masked), the allow list, the deny-all.
    const info = await b.api('GET', `/sandboxes/${sbx.sandboxId}`);
    expect(info.body.network).toMatchObject({
      allowOut: ['api.allowed.test'],
      denyOut: ['0.0.0.0/0'],
      rules: { 'api.allowed.test': [{ transform: { headers: { Authorization: '***' } } }] },
    });
    expect(await authorizationSeen(sbx, 'http://api.allowed.test/headers')).toBe(`Bearer ${V2}`);
    // HTTPS: B's leaf for the name chains to the CA the sandbox trusted on A (one CA for the cluster).
    expect(await authorizationSeen(sbx, 'https://api.allowed.test/headers')).toBe(`Bearer ${V2}`);
    expect((await run(sbx, curl('http://other.allowed.test/headers'))).exit).not.toBe(0);
    await sbx.files.write('/tmp/go', '');
    let heldSaw = '';
    await eventually(
      async () => {
        const r = await run(sbx, 'cat /tmp/held-out');
        heldSaw = r.out;
        return r.exit === 0 && r.out !== '';
      },
      'the held client to answer',
      150,
      100,
    );
    expect(heldSaw).toBe(`Bearer ${V2}`);

    // A rotation through the gateway reaches the next request (retried until the scheduler no longer offers A).
    await eventually(
      async () => (await gw('POST', `/secrets/${secretId}`, { value: V3 })).status === 200,
      'a write through the gateway while A is gone',
      100,
      200,
    );
    expect(await authorizationSeen(sbx, 'https://api.allowed.test/headers')).toBe(`Bearer ${V3}`);
    expect(b.logs()).not.toMatch(/sk-cluster/);
    expect((await b.api('DELETE', `/sandboxes/${sbx.sandboxId}`)).status).toBe(204);
    a = await a.restart();
    expect((await a.api('GET', `/sandboxes/${sbx.sandboxId}`)).status).toBe(404);
    // A restarted copies the secret as it is now.
    expect((await a.api('GET', `/secrets/${secretId}`)).body).toEqual(
      (await b.api('GET', `/secrets/${secretId}`)).body,
    );
  });

  it('leaves nothing behind on either node', async () => {
    expect((await gw('DELETE', `/secrets/${secretId}`)).status).toBe(204);
    for (const n of [a, b]) expect((await n.api('GET', '/secrets')).body).toEqual([]);
    for (const n of [a, b]) expect(await endNode(n)).toEqual({ stray: [], exitCode: 0 });
  });
});
