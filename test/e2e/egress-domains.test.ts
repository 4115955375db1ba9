// Domain egress against a fake internet on this machine (documentation addresses only, in a namespace the test
// makes; see fixtures/fake-internet.ts): allowOut domains through the node's egress proxy and resolver, a live
// update cutting a proxied connection, and the API's refusals. docs/networking.md#domain-egress.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommandExitError, Sandbox } from 'e2b';
import { REPO, eventually } from './harness.js';
import { describeNode } from './fixture.js';
import { HOST_WAN_IP, startFakeInternet, type FakeInternet } from './fixtures/fake-internet.js';

const WEB = '198.51.100.30';
const ECHO = '198.51.100.31';
const DNS = '198.51.100.53';
const RECORDS: Record<string, string> = {
  'api.allowed.test': WEB,
  'other.test': WEB,
  'a.wild.test': WEB,
  'deep.a.wild.test': WEB,
  'wild.test': WEB,
  'echo.allowed.test': ECHO,
  // Rebinding attempts: an allowed name pointing into always_denied_cidrs or at the host itself.
  'internal.test': '10.99.0.1',
  'host.test': HOST_WAN_IP,
};
const ALLOWED = ['api.allowed.test', '*.wild.test', 'echo.allowed.test', 'internal.test', 'host.test'];
const CLOSED = { denyOut: ['0.0.0.0/0'] };

const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { encoding: 'utf8', stdio: 'pipe' });

/** A CA and a certificate for the test names, signed by it (the "public" CA of the fake internet). */
function makeCerts(dir: string): { ca: string; cert: string; key: string } {
  const p = (f: string) => join(dir, f);
  sh('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-days',
    '2',
    '-subj',
    '/CN=aenv egress test CA',
    '-keyout',
    p('ca.key'),
    '-out',
    p('ca.pem'),
  ]);
  sh('openssl', [
    'req',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-subj',
    '/CN=web',
    '-keyout',
    p('web.key'),
    '-out',
    p('web.csr'),
  ]);
  writeFileSync(
    p('ext'),
    'subjectAltName=DNS:api.allowed.test,DNS:other.test,DNS:wild.test,DNS:*.wild.test,DNS:deep.a.wild.test\n',
  );
  sh('openssl', [
    'x509',
    '-req',
    '-in',
    p('web.csr'),
    '-CA',
    p('ca.pem'),
    '-CAkey',
    p('ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    p('ext'),
    '-out',
    p('web.pem'),
  ]);
  return { ca: p('ca.pem'), cert: p('web.pem'), key: p('web.key') };
}

interface Run {
  exit: number;
  out: string;
}

async function run(sbx: Sandbox, cmd: string): Promise<Run> {
  try {
    const r = await sbx.commands.run(cmd, { timeoutMs: 30_000 });
    return { exit: 0, out: r.stdout };
  } catch (e) {
    if (e instanceof CommandExitError) return { exit: e.exitCode, out: e.stdout + e.stderr };
    throw e;
  }
}

const curl = (args: string) => `curl -sS --cacert /tmp/ca.pem --connect-timeout 3 -m 8 ${args}`;

describe('domain egress', () => {
  let net: FakeInternet;
  let hosts: ChildProcess | undefined;
  let dir: string;
  let sbx: Sandbox;

  // Registered before the node: runs after its teardown.
  afterAll(async () => {
    hosts?.kill('SIGKILL');
    await net?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  const { server } = describeNode({
    name: 'egr',
    toml: ['[network.egress]', `resolvers = ["${DNS}"]`, '[network.dns]', `nameserver = "${DNS}"`].join('\n'),
  });
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'aenv-e2e-egress-'));
    const certs = makeCerts(dir);
    net = await startFakeInternet(server.cidrs);
    for (const ip of [WEB, ECHO, DNS]) net.exec('ip', ['addr', 'add', `${ip}/32`, 'dev', 'wan0']);
    // Nothing leaves the machine: the proxy's own upstream connections (from the host) and sandbox traffic
    // both reach these addresses through the fake internet's veth.
    for (const ip of [WEB, ECHO, DNS]) expect(sh('ip', ['route', 'get', ip])).toMatch(/ dev efw\d+ /);
    hosts = spawn(
      'nsenter',
      [
        `--net=${net.netns}`,
        process.execPath,
        join(REPO, 'test/e2e/fixtures/egress-upstream.mjs'),
        JSON.stringify({
          dns: DNS,
          records: RECORDS,
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
      hosts!.stdout!.on('data', (b: Buffer) => b.toString().includes('ready') && resolve());
      hosts!.stderr!.on('data', (b: Buffer) => (err += b.toString()));
      hosts!.on('exit', (code) => reject(new Error(`fake internet hosts exited ${code}: ${err}`)));
    });
    sbx = await Sandbox.create({ timeoutMs: 300_000, network: { allowOut: ALLOWED, ...CLOSED } });
    await sbx.files.write('/tmp/ca.pem', readFileSync(certs.ca, 'utf8'));
  });

  it('reaches an allowed domain over HTTPS and HTTP, resolved by the node resolver', async () => {
    const info = await server.api('GET', `/sandboxes/${sbx.sandboxId}`);
    expect(info.body.network.allowOut).toEqual(ALLOWED);
    expect(await run(sbx, curl('https://api.allowed.test/'))).toEqual({
      exit: 0,
      out: 'tls:sni=api.allowed.test',
    });
    expect(await run(sbx, curl('http://api.allowed.test/'))).toEqual({
      exit: 0,
      out: 'web:host=api.allowed.test',
    });
  });

  it('refuses another domain on the same address, by DNS, SNI and Host', async () => {
    // The node resolver does not answer names outside allowOut...
    expect((await run(sbx, 'getent hosts other.test')).exit).not.toBe(0);
    // ...and a client that knows the address anyway is judged by the name it asks for.
    const tls = await run(sbx, curl(`--resolve other.test:443:${WEB} https://other.test/`));
    expect(tls.exit).not.toBe(0);
    expect(tls.out).not.toContain('tls:');
    const http = await run(sbx, curl(`-H 'Host: other.test' http://${WEB}/`));
    expect(http.out).toMatch(/^aenv egress: other\.test is not in the sandbox's allowOut/);
    // Without any name at all: a bare address is neither an allowOut CIDR nor a domain.
    expect((await run(sbx, curl(`-k https://${WEB}/`))).exit).not.toBe(0);
  });

  it('connects to the name as the node resolves it, never to the dialled address, nor into denied ranges', async () => {
    // Dialling the echo host with an allowed name reaches the name's own address.
    expect(await run(sbx, curl(`--resolve api.allowed.test:80:${ECHO} http://api.allowed.test/`))).toEqual({
      exit: 0,
      out: 'web:host=api.allowed.test',
    });
    for (const name of ['internal.test', 'host.test']) {
      const r = await run(sbx, curl(`--resolve ${name}:80:${WEB} http://${name}/`));
      expect(r.out).toMatch(/^aenv egress: .* resolves only to addresses sandboxes may not reach/);
    }
  });

  it('refuses raw TCP to an allowed domain address, on the proxied ports and any other', async () => {
    const raw = (port: number) =>
      run(
        sbx,
        `timeout 5 bash -c 'exec 3<>/dev/tcp/${ECHO}/${port}; printf "hello\\r\\n\\r\\n" >&3; cat <&3'`,
      );
    for (const port of [443, 80, 2222]) {
      const r = await raw(port);
      // An echo would mean the stream reached the echo host.
      expect(r.out).not.toContain('hello');
    }
  });

  it('matches wildcards on subdomains at any depth, not on the apex', async () => {
    expect(await run(sbx, curl('https://a.wild.test/'))).toEqual({ exit: 0, out: 'tls:sni=a.wild.test' });
    expect(await run(sbx, curl('https://deep.a.wild.test/'))).toEqual({
      exit: 0,
      out: 'tls:sni=deep.a.wild.test',
    });
    const apex = await run(sbx, curl(`--resolve wild.test:443:${WEB} https://wild.test/`));
    expect(apex.exit).not.toBe(0);
    expect(apex.out).not.toContain('tls:');
  });

  it('a live update replaces the whole policy and cuts a proxied connection it no longer allows', async () => {
    const stream = await sbx.commands.run(
      `${curl('-N -m 120 http://api.allowed.test/stream')} > /tmp/stream.out`,
      {
        background: true,
        timeoutMs: 0,
      },
    );
    await eventually(
      async () => (await sbx.files.read('/tmp/stream.out').catch(() => '')).includes('line 2'),
      'the stream to flow',
      100,
      200,
    );
    await sbx.updateNetwork({ allowOut: ['*.wild.test'], ...CLOSED });
    const ended = await stream.wait().then(
      (r) => r.exitCode,
      (e: unknown) => (e instanceof CommandExitError ? e.exitCode : -1),
    );
    // curl's 28 would be its own 30 s limit: the connection stayed open.
    expect(ended).not.toBe(28);
    expect(ended).not.toBe(0);
    expect((await run(sbx, curl('https://api.allowed.test/'))).exit).not.toBe(0);
    expect((await run(sbx, curl('https://a.wild.test/'))).exit).toBe(0);
    await sbx.updateNetwork({ allowOut: ALLOWED, ...CLOSED });
    expect((await run(sbx, curl('https://api.allowed.test/'))).exit).toBe(0);
  });

  it('a fork inherits the policy at fork time, and a paused sandbox resumes with its policy', async () => {
    await sbx.updateNetwork({ allowOut: ['*.wild.test'], ...CLOSED });
    const [child] = await sbx.fork({ count: 1, timeoutMs: 120_000 });
    if (!(child instanceof Sandbox)) throw child;
    try {
      expect((await run(child, curl('https://a.wild.test/'))).out).toBe('tls:sni=a.wild.test');
      expect((await run(child, curl('https://api.allowed.test/'))).exit).not.toBe(0);
      // The parent's later update is the parent's alone.
      await sbx.updateNetwork({ allowOut: ALLOWED, ...CLOSED });
      expect((await run(child, curl('https://api.allowed.test/'))).exit).not.toBe(0);
      expect(await child.pause()).toBe(true);
      const resumed = await Sandbox.connect(child.sandboxId);
      expect((await run(resumed, curl('https://a.wild.test/'))).out).toBe('tls:sni=a.wild.test');
      expect((await run(resumed, curl(`-H 'Host: other.test' http://${WEB}/`))).out).toMatch(/^aenv egress:/);
    } finally {
      await child.kill();
    }
  });

  it('refuses malformed domains, a bare *, domains in denyOut and over-long lists, naming the entry', async () => {
    const cases: [object, RegExp][] = [
      [{ allowOut: ['*'] }, /invalid allowOut domain entry "\*"/],
      [{ allowOut: ['api.allowed.test', 'a..b'] }, /invalid allowOut domain entry "a\.\.b"/],
      [{ allowOut: ['a.*.test'] }, /invalid allowOut domain entry "a\.\*\.test"/],
      [{ denyOut: ['other.test'] }, /denyOut entry "other\.test" must be an IP address or CIDR block/],
      [
        { allowOut: Array.from({ length: 1001 }, (_, i) => `h${i}.test`) },
        /allowOut has 1001 entries; at most 1000/,
      ],
      [{ allowOut: ['a.test', 7] }, /allowOut(\[1\]|\.1)/],
    ];
    for (const [network, message] of cases) {
      const create = await server.api('POST', '/sandboxes', { templateID: 'base', network });
      expect(create.status).toBe(400);
      expect(create.body.message).toMatch(message);
      const put = await server.api('PUT', `/sandboxes/${sbx.sandboxId}/network`, network);
      expect(put.status).toBe(400);
      expect(put.body).toEqual({ code: 400, message: expect.stringMatching(message) });
    }
    // A refused update left the policy as it was.
    expect((await run(sbx, curl('https://api.allowed.test/'))).exit).toBe(0);
  });
});
