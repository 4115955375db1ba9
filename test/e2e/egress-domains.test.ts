// Domain egress against a fake internet on this machine (documentation addresses only, in a namespace the test
// makes; see fixtures/fake-internet.ts): allowOut domains through the node's egress proxy and resolver, a live
// update cutting a proxied connection, forks and snapshot launches keeping the policy, and the API's refusals;
// and egress through a SOCKS5 upstream (microsocks, run in the fake internet) with and without RFC 1929
// credentials. docs/networking.md#domain-egress.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommandExitError, Sandbox } from 'e2b';
import { REPO, eventually } from './harness.js';
import { describeNode } from './fixture.js';
import { makeTestCerts, runIn as run } from './fixtures/test-ca.js';
import { HOST_WAN_IP, startFakeInternet, type FakeInternet } from './fixtures/fake-internet.js';
import { startSocks, writeNameFiles, type SocksServer } from './fixtures/socks-server.js';

const WEB = '198.51.100.30';
const ECHO = '198.51.100.31';
const DNS = '198.51.100.53';
/** microsocks in the fake internet: port 1080 without credentials, 1081 with SOCKS_USER / SOCKS_PASS. */
const SOCKS = '198.51.100.40';
const SOCKS_USER = 'agent';
const SOCKS_PASS = 'socks-pass-never-shown';
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
  'socks.test': '198.51.100.40',
};
const ALLOWED = ['api.allowed.test', '*.wild.test', 'echo.allowed.test', 'internal.test', 'host.test'];
const CLOSED = { denyOut: ['0.0.0.0/0'] };

const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { encoding: 'utf8', stdio: 'pipe' });

const curl = (args: string) => `curl -sS --cacert /tmp/ca.pem --connect-timeout 3 -m 8 ${args}`;

describe('domain egress', () => {
  let net: FakeInternet;
  let hosts: ChildProcess | undefined;
  let socks: SocksServer | undefined;
  let socksAuth: SocksServer | undefined;
  let dir: string;
  let sbx: Sandbox;

  // Registered before the node: runs after its teardown.
  afterAll(async () => {
    hosts?.kill('SIGKILL');
    socks?.proc.kill('SIGKILL');
    socksAuth?.proc.kill('SIGKILL');
    await net?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  const { server } = describeNode({
    name: 'egr',
    toml: ['[network.egress]', `resolvers = ["${DNS}"]`, '[network.dns]', `nameserver = "${DNS}"`].join('\n'),
  });
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'aenv-e2e-egress-'));
    const certs = makeTestCerts(dir, 'aenv egress test CA', [
      'api.allowed.test',
      'other.test',
      'wild.test',
      '*.wild.test',
      'deep.a.wild.test',
    ]);
    net = await startFakeInternet(server.cidrs);
    for (const ip of [WEB, ECHO, DNS, SOCKS]) net.exec('ip', ['addr', 'add', `${ip}/32`, 'dev', 'wan0']);
    // Nothing leaves the machine: the proxy's own upstream connections (from the host) and sandbox traffic
    // both reach these addresses through the fake internet's veth.
    for (const ip of [WEB, ECHO, DNS, SOCKS]) expect(sh('ip', ['route', 'get', ip])).toMatch(/ dev efw\d+ /);
    writeNameFiles(dir, RECORDS, DNS);
    socks = startSocks({ netns: net.netns, dir, ip: SOCKS, port: 1080 });
    socksAuth = startSocks({
      netns: net.netns,
      dir,
      ip: SOCKS,
      port: 1081,
      credentials: { user: SOCKS_USER, pass: SOCKS_PASS },
    });
    await eventually(() => {
      const listening = net.exec('ss', ['-ltn']);
      return listening.includes(`${SOCKS}:1080`) && listening.includes(`${SOCKS}:1081`);
    }, 'the SOCKS servers to listen');
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

  it('a bulk download is copied by the kernel splice helper, intact; a live update cuts it and ends the helper', async () => {
    // Connections a splice helper copies now (docs/networking.md#kernel-splice).
    const spliced = async () => {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith('aenv_network_egress_spliced_connections '));
      return line === undefined ? NaN : Number(line.slice(line.lastIndexOf(' ') + 1));
    };
    // 64 MiB of zeros from the fake web host, checked end to end; its helper ends with the connection.
    const zeros = createHash('sha256')
      .update(Buffer.alloc(64 << 20))
      .digest('hex');
    expect(await run(sbx, `${curl('-m 60 http://api.allowed.test/big?mb=64')} | sha256sum`)).toEqual({
      exit: 0,
      out: `${zeros}  -\n`,
    });
    await eventually(
      async () => (await spliced()) === 0,
      'the finished download to free its helper',
      100,
      200,
    );
    // A slow reader keeps its helper until the policy no longer allows the name.
    const slow = await sbx.commands.run(
      `${curl('-m 120 --limit-rate 200k -o /dev/null http://api.allowed.test/big?mb=512')}`,
      { background: true, timeoutMs: 0 },
    );
    await eventually(
      async () => (await spliced()) === 1,
      'the download to reach the splice helper',
      100,
      200,
    );
    await sbx.updateNetwork({ allowOut: ['*.wild.test'], ...CLOSED });
    const ended = await slow.wait().then(
      (r) => r.exitCode,
      (e: unknown) => (e instanceof CommandExitError ? e.exitCode : -1),
    );
    // curl's 28 would be its own limit: the cut did not reach the spliced connection.
    expect(ended).not.toBe(28);
    expect(ended).not.toBe(0);
    await eventually(async () => (await spliced()) === 0, 'the cut to end the helper', 100, 200);
    await sbx.updateNetwork({ allowOut: ALLOWED, ...CLOSED });
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

  it('a snapshot launch without network gets the policy at capture time; one with its own network gets that', async () => {
    await sbx.updateNetwork({ allowOut: ['*.wild.test'], ...CLOSED });
    const snapshot = await sbx.createSnapshot();
    // The parent's later update is the parent's alone.
    await sbx.updateNetwork({ allowOut: ALLOWED, ...CLOSED });
    const launched: Sandbox[] = [];
    try {
      const inherited = await Sandbox.create(snapshot.snapshotId, { timeoutMs: 120_000 });
      launched.push(inherited);
      expect((await run(inherited, curl('https://a.wild.test/'))).out).toBe('tls:sni=a.wild.test');
      expect((await run(inherited, curl('https://api.allowed.test/'))).exit).not.toBe(0);
      expect((await run(inherited, curl(`-H 'Host: api.allowed.test' http://${WEB}/`))).out).toMatch(
        /^aenv egress: api\.allowed\.test is not in the sandbox's allowOut/,
      );
      const info = await server.api('GET', `/sandboxes/${inherited.sandboxId}`);
      expect(info.body.network).toMatchObject({ allowOut: ['*.wild.test'], denyOut: ['0.0.0.0/0'] });
      // A create's own network replaces the recorded one whole.
      const own = await Sandbox.create(snapshot.snapshotId, {
        timeoutMs: 120_000,
        network: { allowOut: ['api.allowed.test'], ...CLOSED },
      });
      launched.push(own);
      expect((await server.api('GET', `/sandboxes/${own.sandboxId}`)).body.network.allowOut).toEqual([
        'api.allowed.test',
      ]);
      expect((await run(own, curl('https://api.allowed.test/'))).out).toBe('tls:sni=api.allowed.test');
      expect((await run(own, curl('https://a.wild.test/'))).exit).not.toBe(0);
    } finally {
      for (const s of launched) await s.kill();
      await Sandbox.deleteSnapshot(snapshot.snapshotId);
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

  describe('through a SOCKS5 egressProxy', () => {
    const NOAUTH = `${SOCKS}:1080`;
    const AUTH = `${SOCKS}:1081`;
    // A name (its address is not in allowOut: it goes by name) and an address (the raw echo host).
    const allowOut = ['api.allowed.test', ECHO];
    const connectedTo = (log: string) => [...log.matchAll(/connected to (\S+?:\d+)/g)].map((m) => m[1]);
    const echo = (sb: Sandbox) =>
      run(sb, `timeout 5 bash -c 'exec 3<>/dev/tcp/${ECHO}/2222; echo hello-echo >&3; head -n1 <&3'`);
    const web = (sb: Sandbox) => run(sb, curl('http://api.allowed.test/'));
    const WEB_OK = { exit: 0, out: 'web:host=api.allowed.test' };
    const ECHO_OK = { exit: 0, out: 'hello-echo\n' };
    let tsb: Sandbox;

    beforeAll(async () => {
      tsb = await Sandbox.create({
        timeoutMs: 300_000,
        network: { allowOut, ...CLOSED, egressProxy: { address: NOAUTH } },
      });
      await tsb.files.write('/tmp/ca.pem', readFileSync(join(dir, 'ca.pem'), 'utf8'));
    });
    afterAll(async () => {
      await tsb?.kill();
    });

    it('tunnels allowed TCP through it: domains by name, CIDRs by address; denied flows never reach it', async () => {
      const info = await server.api('GET', `/sandboxes/${tsb.sandboxId}`);
      expect(info.body.network.egressProxy).toEqual({ address: NOAUTH });
      expect(await web(tsb)).toEqual(WEB_OK);
      expect(await run(tsb, curl('https://api.allowed.test/'))).toEqual({
        exit: 0,
        out: 'tls:sni=api.allowed.test',
      });
      // An allowOut address: asked for by IP, on whatever port and protocol the sandbox uses.
      expect(await echo(tsb)).toEqual(ECHO_OK);
      expect(connectedTo(socks!.log())).toEqual([
        'api.allowed.test:80',
        'api.allowed.test:443',
        `${ECHO}:2222`,
      ]);
      // Not allowed: another name, a bare address outside allowOut, raw TCP to one: refused by the node.
      expect((await run(tsb, curl(`--resolve other.test:80:${WEB} http://other.test/`))).out).toMatch(
        /^aenv egress: other\.test is not in the sandbox's allowOut/,
      );
      expect((await run(tsb, curl(`http://${WEB}/`))).out).toMatch(/^aenv egress:/);
      expect((await run(tsb, curl(`--connect-timeout 2 http://${WEB}:8080/`))).exit).not.toBe(0);
      expect(connectedTo(socks!.log())).toHaveLength(3);
    });

    it('authenticates with RFC 1929 credentials, never shows the password, and fails with wrong ones', async () => {
      await tsb.updateNetwork({
        allowOut,
        ...CLOSED,
        egressProxy: { address: AUTH, username: SOCKS_USER, password: SOCKS_PASS },
      });
      expect(await echo(tsb)).toEqual(ECHO_OK);
      expect(await web(tsb)).toEqual(WEB_OK);
      expect(connectedTo(socksAuth!.log())).toEqual([`${ECHO}:2222`, 'api.allowed.test:80']);
      const info = await server.api('GET', `/sandboxes/${tsb.sandboxId}`);
      expect(info.body.network.egressProxy).toEqual({ address: AUTH, username: SOCKS_USER });
      expect(JSON.stringify(info.body)).not.toContain(SOCKS_PASS);
      expect((await tsb.getInfo()).network?.egressProxy).toEqual({ address: AUTH, username: SOCKS_USER });

      await tsb.updateNetwork({
        allowOut,
        ...CLOSED,
        egressProxy: { address: AUTH, username: SOCKS_USER, password: 'wrong' },
      });
      expect((await echo(tsb)).out).not.toContain('hello-echo');
      expect((await web(tsb)).out).toMatch(
        /^aenv egress: the egress proxy did not connect api\.allowed\.test:80/,
      );
      expect(connectedTo(socksAuth!.log())).toHaveLength(2);
    });

    it('an update without egressProxy sends traffic out directly; pause and resume keep the proxy', async () => {
      await tsb.updateNetwork({ allowOut, ...CLOSED });
      expect(await echo(tsb)).toEqual(ECHO_OK);
      expect(await web(tsb)).toEqual(WEB_OK);
      expect(
        (await server.api('GET', `/sandboxes/${tsb.sandboxId}`)).body.network.egressProxy,
      ).toBeUndefined();
      expect(connectedTo(socks!.log()).length + connectedTo(socksAuth!.log()).length).toBe(5);

      await tsb.updateNetwork({ allowOut, ...CLOSED, egressProxy: { address: NOAUTH } });
      expect(await tsb.pause()).toBe(true);
      const resumed = await Sandbox.connect(tsb.sandboxId);
      expect(await echo(resumed)).toEqual(ECHO_OK);
      expect(connectedTo(socks!.log())).toHaveLength(4);
    });

    it('refuses a malformed egressProxy or one in a denied range, naming the field', async () => {
      const cases: [unknown, RegExp][] = [
        ['198.51.100.40:1080', /^egressProxy must be an object/],
        [{ address: SOCKS }, /^egressProxy\.address "198\.51\.100\.40" has no port/],
        [{ address: `${SOCKS}:0` }, /egressProxy\.address .* has a port outside 1-65535/],
        [{ address: `${SOCKS}:65536` }, /egressProxy\.address .* has a port outside 1-65535/],
        [{ address: 1080 }, /^egressProxy\.address must be a string/],
        [{ address: NOAUTH, username: 'u'.repeat(256) }, /^egressProxy\.username must be 1 to 255 bytes/],
        [
          { address: NOAUTH, username: 'u', password: 'p'.repeat(256) },
          /^egressProxy\.password must be 1 to 255/,
        ],
        [{ address: NOAUTH, username: ['u'] }, /^egressProxy\.username must be a string/],
        [{ address: NOAUTH, type: 'socks4' }, /^egressProxy\.type is not a field/],
        // The node dials the proxy for the sandbox: the ranges no sandbox may reach are refused for it too.
        [
          { address: '10.99.0.1:1080' },
          /^egressProxy\.address "10\.99\.0\.1:1080" is in a range sandboxes may not reach/,
        ],
        [{ address: '127.0.0.1:1080' }, /^egressProxy\.address "127\.0\.0\.1:1080" is in a range/],
        [{ address: '169.254.169.254:80' }, /is in a range sandboxes may not reach/],
        // A name is resolved as the node will dial it: it must resolve, and not only into denied ranges.
        [
          { address: 'nowhere.test:1080' },
          /^egressProxy\.address "nowhere\.test:1080": nowhere\.test does not resolve/,
        ],
        [
          { address: 'internal.test:1080' },
          /^egressProxy\.address "internal\.test:1080": .*resolves only to addresses sandboxes may not reach/,
        ],
      ];
      for (const [egressProxy, message] of cases) {
        const network = { allowOut, ...CLOSED, egressProxy };
        const create = await server.api('POST', '/sandboxes', { templateID: 'base', network });
        expect(create.status, JSON.stringify(egressProxy)).toBe(400);
        expect(create.body).toEqual({ code: 400, message: expect.stringMatching(message) });
        const put = await server.api('PUT', `/sandboxes/${tsb.sandboxId}/network`, network);
        expect(put.status, JSON.stringify(egressProxy)).toBe(400);
        expect(put.body).toEqual({ code: 400, message: expect.stringMatching(message) });
      }
      // A refused update left the policy (and the proxy) as it was.
      expect(await echo(tsb)).toEqual(ECHO_OK);
      expect(connectedTo(socks!.log())).toHaveLength(5);
      // The same proxy by name.
      await tsb.updateNetwork({ allowOut, ...CLOSED, egressProxy: { address: `socks.test:1080` } });
      expect(await echo(tsb)).toEqual(ECHO_OK);
      expect(connectedTo(socks!.log())).toHaveLength(6);
    });

    it('a live update that changes the proxy cuts what the old one carries; a fork keeps the new one', async () => {
      const stream = await tsb.commands.run(
        `${curl('-N -m 120 http://api.allowed.test/stream')} > /tmp/socks-stream.out`,
        { background: true, timeoutMs: 0 },
      );
      await eventually(
        async () => (await tsb.files.read('/tmp/socks-stream.out').catch(() => '')).includes('line 2'),
        'the tunneled stream to flow',
        100,
        200,
      );
      expect(connectedTo(socks!.log())).toHaveLength(7);
      const auth = { address: AUTH, username: SOCKS_USER, password: SOCKS_PASS };
      await tsb.updateNetwork({ allowOut, ...CLOSED, egressProxy: auth });
      const ended = await stream.wait().then(
        (r) => r.exitCode,
        (e: unknown) => (e instanceof CommandExitError ? e.exitCode : -1),
      );
      // curl's 28 would be its own limit: the connection stayed open.
      expect(ended).not.toBe(28);
      expect(ended).not.toBe(0);
      const [child] = await tsb.fork({ count: 1, timeoutMs: 120_000 });
      if (!(child instanceof Sandbox)) throw child;
      try {
        expect(await echo(child)).toEqual(ECHO_OK);
        expect(connectedTo(socksAuth!.log())).toEqual([
          `${ECHO}:2222`,
          'api.allowed.test:80',
          `${ECHO}:2222`,
        ]);
        expect((await server.api('GET', `/sandboxes/${child.sandboxId}`)).body.network.egressProxy).toEqual({
          address: AUTH,
          username: SOCKS_USER,
        });
      } finally {
        await child.kill();
      }
    });
  });
});
