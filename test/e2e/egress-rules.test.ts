// network.rules against a fake internet on this machine (documentation addresses only, in a namespace the test
// makes; see fixtures/fake-internet.ts): the egress proxy injects a rule's header into HTTPS and HTTP requests
// to its domain, which the sandbox never sees, passes other domains through untouched, follows live updates
// and pause/resume, and refuses bad rules naming the entry; with an egressProxy too, intercepted requests leave
// through the SOCKS5 upstream (microsocks in the fake internet). docs/networking.md#credentials-at-the-edge.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommandExitError, Sandbox, Secret } from 'e2b';
import { REPO, eventually } from './harness.js';
import { describeNode } from './fixture.js';
import { makeTestCerts, runIn as run } from './fixtures/test-ca.js';
import { HOST_WAN_IP, startFakeInternet, type FakeInternet } from './fixtures/fake-internet.js';
import { startSocks, writeNameFiles, type SocksServer } from './fixtures/socks-server.js';

const WEB = '198.51.100.30';
const ECHO = '198.51.100.31';
const DNS = '198.51.100.53';
/** microsocks in the fake internet (the egressProxy part): 1080 without credentials, 1081 with them. */
const SOCKS = '198.51.100.40';
const RECORDS = { 'api.allowed.test': WEB, 'other.allowed.test': WEB };
const SECRET = 'Bearer edge-s3cret-0f9d2c';
const SECRET_PART = 'edge-s3cret-0f9d2c';
const CLOSED = { denyOut: ['0.0.0.0/0'] };
const ALLOWED = ['api.allowed.test', 'other.allowed.test'];
const RULES = { 'api.allowed.test': [{ transform: { headers: { Authorization: SECRET } } }] };

const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { encoding: 'utf8', stdio: 'pipe' });

/** curl with the sandbox's own trust store (no --cacert, no -k). */
const curl = (args: string) => `curl -sS --connect-timeout 3 -m 8 ${args}`;
/** What the fake internet's server saw. */
const seen = async (sbx: Sandbox, args: string) => {
  const r = await run(sbx, curl(args));
  expect(r, args).toMatchObject({ exit: 0 });
  return JSON.parse(r.out) as { host: string; authorization: string | null };
};

const dir = mkdtempSync(join(tmpdir(), 'aenv-e2e-rules-'));
const certs = makeTestCerts(dir, 'aenv rules test CA', ['api.allowed.test', 'other.allowed.test']);

describe('network.rules: credentials injected at the edge', () => {
  let net: FakeInternet;
  let hosts: ChildProcess | undefined;
  let sbx: Sandbox;

  // Registered before the node: runs after its teardown.
  afterAll(async () => {
    hosts?.kill('SIGKILL');
    await net?.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const { server } = describeNode({
    name: 'rul',
    toml: [
      '[network.egress]',
      `resolvers = ["${DNS}"]`,
      `upstream_ca_file = "${certs.ca}"`,
      '[network.dns]',
      `nameserver = "${DNS}"`,
    ].join('\n'),
  });
  beforeAll(async () => {
    net = await startFakeInternet(server.cidrs);
    for (const ip of [WEB, ECHO, DNS, SOCKS]) net.exec('ip', ['addr', 'add', `${ip}/32`, 'dev', 'wan0']);
    // Nothing leaves the machine: the proxy's upstream hop and sandbox traffic reach the fake internet's veth.
    for (const ip of [WEB, DNS]) expect(sh('ip', ['route', 'get', ip])).toMatch(/ dev efw\d+ /);
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
    sbx = await Sandbox.create({
      timeoutMs: 300_000,
      envs: { VISIBLE: 'yes' },
      network: { allowOut: ALLOWED, ...CLOSED, rules: RULES },
    });
    await sbx.files.write('/tmp/ca.pem', readFileSync(certs.ca, 'utf8'));
  });

  it('injects the header over HTTPS (the sandbox trusts the node CA) and HTTP, replacing the sandbox own', async () => {
    expect(await seen(sbx, 'https://api.allowed.test/headers')).toEqual({
      host: 'api.allowed.test',
      authorization: SECRET,
    });
    expect(await seen(sbx, `-H 'Authorization: Bearer mine' https://api.allowed.test/headers`)).toEqual({
      host: 'api.allowed.test',
      authorization: SECRET,
    });
    expect((await seen(sbx, 'http://api.allowed.test/headers')).authorization).toBe(SECRET);
    // Several requests on one kept-alive connection each get it.
    const twice = await run(
      sbx,
      curl(
        'https://api.allowed.test/headers -o /dev/null -w "\\n%{num_connects}\\n" https://api.allowed.test/headers',
      ),
    );
    expect(twice.exit).toBe(0);
    expect(twice.out.match(new RegExp(SECRET_PART, 'g'))).toHaveLength(1);
    expect(twice.out.trim().split('\n').at(-1)).toBe('0');
  });

  it('passes a domain without rules through untouched: the sandbox sees the server own certificate', async () => {
    expect(await seen(sbx, '--cacert /tmp/ca.pem https://other.allowed.test/headers')).toEqual({
      host: 'other.allowed.test',
      authorization: null,
    });
    // Not the node CA's leaf: the sandbox's default trust store does not know the fake internet's CA.
    const own = await run(sbx, curl('https://other.allowed.test/headers'));
    expect(own.exit).toBe(60);
    const issuer = await run(
      sbx,
      `openssl s_client -connect other.allowed.test:443 -servername other.allowed.test </dev/null 2>/dev/null | openssl x509 -noout -issuer`,
    );
    expect(issuer.out).toMatch(/aenv rules test CA/);
    const intercepted = await run(
      sbx,
      `openssl s_client -connect api.allowed.test:443 -servername api.allowed.test </dev/null 2>/dev/null | openssl x509 -noout -issuer`,
    );
    expect(intercepted.out).toMatch(/aenv egress CA/);
  });

  it('never shows the value inside the sandbox, in API answers or in the logs', async () => {
    const inside = await run(
      sbx,
      [
        'env',
        'cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"',
        'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " "',
        // Spelled in two parts: this command's own cmdline is among those read above.
        `p=${SECRET_PART.slice(0, 6)}; grep -rl -e "$p${SECRET_PART.slice(6)}" /etc /tmp /root /home /run /var/tmp /opt 2>/dev/null`,
        // The request as the sandbox sent it and the response as it got it.
        curl('-v https://api.allowed.test/ 2>&1'),
      ].join('; echo; '),
    );
    expect(inside.out).toContain('VISIBLE=yes');
    expect(inside.out).toContain('tls:sni=api.allowed.test');
    expect(inside.out).not.toContain(SECRET_PART);
    const info = await server.api('GET', `/sandboxes/${sbx.sandboxId}`);
    expect(info.body.network.rules).toEqual({
      'api.allowed.test': [{ transform: { headers: { Authorization: '***' } } }],
    });
    const list = await server.api('GET', '/v2/sandboxes');
    expect(JSON.stringify([info.body, list.body])).not.toContain(SECRET_PART);
    expect(server.logs()).toContain('api.allowed.test');
    expect(server.logs()).not.toContain(SECRET_PART);
  });

  it('a live update replaces the rules; rules alone grant no access', async () => {
    const other = 'Bearer second';
    await sbx.updateNetwork({
      allowOut: ALLOWED,
      ...CLOSED,
      rules: { '*.allowed.test': [{ transform: { headers: { Authorization: other, 'X-Extra': '1' } } }] },
    });
    expect((await seen(sbx, 'https://api.allowed.test/headers')).authorization).toBe(other);
    // The wildcard now covers the other name as well: intercepted, so the node CA's leaf is trusted.
    expect((await seen(sbx, 'https://other.allowed.test/headers')).authorization).toBe(other);
    // Omitting rules clears them: passthrough again, the server's own certificate.
    await sbx.updateNetwork({ allowOut: ALLOWED, ...CLOSED });
    expect(
      (await seen(sbx, '--cacert /tmp/ca.pem https://api.allowed.test/headers')).authorization,
    ).toBeNull();
    expect((await server.api('GET', `/sandboxes/${sbx.sandboxId}`)).body.network.rules).toBeUndefined();
    // A rule for a domain allowOut does not allow reaches nothing.
    await sbx.updateNetwork({ ...CLOSED, rules: RULES });
    expect((await run(sbx, curl('https://api.allowed.test/headers'))).exit).not.toBe(0);
    // Past DNS, with the address known: the proxy judges the name by the CIDR policy, which denies it.
    const known = await run(
      sbx,
      curl(`--resolve api.allowed.test:80:${WEB} http://api.allowed.test/headers`),
    );
    expect(known.out).toMatch(/^aenv egress: api\.allowed\.test is not allowed/);
    await sbx.updateNetwork({ allowOut: ALLOWED, ...CLOSED, rules: RULES });
    expect((await seen(sbx, 'https://api.allowed.test/headers')).authorization).toBe(SECRET);
  });

  it('keeps the rules across pause and resume', async () => {
    expect(await sbx.pause()).toBe(true);
    sbx = await Sandbox.connect(sbx.sandboxId);
    expect((await seen(sbx, 'https://api.allowed.test/headers')).authorization).toBe(SECRET);
  });

  it('fills a /secrets value into a rule header at egress; the API never returns it', async () => {
    const value = 'sk-store-7c41e9';
    const created = await Secret.create('upstream-key', value, { metadata: { team: 'a' } });
    expect(created).toMatchObject({ name: 'upstream-key', version: 1, metadata: { team: 'a' } });
    await sbx.updateNetwork({
      allowOut: ALLOWED,
      ...CLOSED,
      rules: {
        'api.allowed.test': [
          { transform: { headers: { Authorization: `Bearer ${Secret.fill('upstream-key')}` } } },
        ],
      },
    });
    expect((await seen(sbx, 'https://api.allowed.test/headers')).authorization).toBe(`Bearer ${value}`);
    // Names are stored lowercased: a placeholder naming the secret in other letters fills the same one.
    await sbx.updateNetwork({
      allowOut: ALLOWED,
      ...CLOSED,
      rules: {
        'api.allowed.test': [
          { transform: { headers: { Authorization: `Bearer ${Secret.fill('Upstream-KEY')}` } } },
        ],
      },
    });
    expect((await seen(sbx, 'https://api.allowed.test/headers')).authorization).toBe(`Bearer ${value}`);
    // A placeholder naming no secret is refused before anything changes; the request keeps the last policy's.
    const unknown = {
      'api.allowed.test': [
        { transform: { headers: { Authorization: `Bearer ${Secret.fill('no-such-key')}` } } },
      ],
    };
    for (const [method, path, body] of [
      ['POST', '/sandboxes', { templateID: 'base', network: { rules: unknown } }],
      ['PUT', `/sandboxes/${sbx.sandboxId}/network`, { ...CLOSED, rules: unknown }],
    ] as const) {
      expect(await server.api(method, path, body)).toMatchObject({
        status: 400,
        body: {
          code: 400,
          message:
            'rules["api.allowed.test"][0].transform.headers["Authorization"]: names secret no-such-key, which does not exist (create it with POST /secrets first)',
        },
      });
    }
    expect((await seen(sbx, 'https://api.allowed.test/headers')).authorization).toBe(`Bearer ${value}`);
    const rotated = await Secret.update('upstream-key', 'sk-rotated-2b7d');
    expect(rotated.version).toBe(2);
    expect((await seen(sbx, 'https://api.allowed.test/headers')).authorization).toBe(
      'Bearer sk-rotated-2b7d',
    );
    const answers = [
      await Secret.getInfo('upstream-key'),
      await Secret.list().nextItems(),
      (await server.api('GET', '/secrets')).body,
      (await server.api('GET', `/secrets/${created.secretId}`)).body,
      (await server.api('GET', `/sandboxes/${sbx.sandboxId}`)).body,
    ];
    expect(JSON.stringify(answers)).not.toMatch(/sk-store|sk-rotated/);
    expect((await run(sbx, 'env; cat /proc/[0-9]*/environ | tr "\\0" "\\n"')).out).not.toMatch(
      /sk-store|sk-rotated/,
    );
    expect(server.logs()).not.toMatch(/sk-store|sk-rotated/);
    // Destroyed: the placeholder no longer resolves, the request fails at the edge.
    expect(await Secret.destroy('upstream-key')).toBe(true);
    expect(await Secret.exists('upstream-key')).toBe(false);
    const gone = await run(sbx, curl('-i https://api.allowed.test/headers'));
    expect(gone.out).toMatch(/^HTTP\/1\.1 502/);
    expect(gone.out).toMatch(/names secret upstream-key, which does not exist/);
    await sbx.updateNetwork({ allowOut: ALLOWED, ...CLOSED, rules: RULES });
  });

  it('refuses bad /secrets requests naming the field, never echoing a value', async () => {
    expect((await server.api('POST', '/secrets', { name: 'dup', value: 'v' })).status).toBe(201);
    const cases: [string, string, unknown, number, RegExp][] = [
      ['POST', '/secrets', { name: 'dup', value: 'v' }, 409, /secret dup already exists/],
      ['POST', '/secrets', { name: 'sec_x', value: 'v' }, 400, /sec_ prefix is reserved/],
      ['POST', '/secrets', { name: 'a b', value: 'v' }, 400, /name "a b"/],
      ['POST', '/secrets', { name: 'n1', value: 7 }, 400, /value: must be a string/],
      [
        'POST',
        '/secrets',
        { name: 'n1', value: 'hidden\r\nX: 1' },
        400,
        /value: must hold no control characters/,
      ],
      ['POST', '/secrets', { name: 'n1', value: 'x'.repeat(9000) }, 400, /value: must be at most 8192 bytes/],
      ['POST', '/secrets', { name: 'n1', value: 'v', metadata: { k: 1 } }, 400, /metadata/],
      ['POST', '/secrets', { name: 'n1', value: 'v', other: 1 }, 400, /other/],
      ['POST', '/secrets', undefined, 400, /a JSON body is required/],
      ['POST', '/secrets/dup', { value: '' }, 400, /value: must not be empty/],
      ['POST', '/secrets/nope', { value: 'v' }, 404, /secret nope not found/],
      ['GET', '/secrets/nope', undefined, 404, /secret nope not found/],
      ['DELETE', '/secrets/nope', undefined, 404, /secret nope not found/],
      ['GET', '/secrets?limit=0', undefined, 400, /invalid limit/],
      ['GET', '/secrets?nextToken=%25%25', undefined, 400, /invalid nextToken/],
    ];
    for (const [method, path, body, status, message] of cases) {
      const r = await server.api(method, path, body);
      expect(r.status, `${method} ${path}`).toBe(status);
      expect(r.body, `${method} ${path}`).toEqual({ code: status, message: expect.stringMatching(message) });
      expect(JSON.stringify(r.body)).not.toContain('hidden');
    }
    expect((await server.api('DELETE', '/secrets/dup')).status).toBe(204);
  });

  it('refuses bad rules with a 400 naming the entry, on create and on update, changing nothing', async () => {
    const h = (headers: Record<string, unknown>) => [{ transform: { headers } }];
    const cases: [unknown, RegExp][] = [
      [{ '*': h({ A: '1' }) }, /rules\["\*"\]: the key must be a domain name/],
      [{ 'a..test': h({ A: '1' }) }, /rules\["a\.\.test"\]/],
      [{ 'a.test': h({ A: 7 }) }, /rules\["a\.test"\]\[0\]\.transform\.headers\["A"\] must be a string/],
      [{ 'a.test': h({ 'Bad Name': 'v' }) }, /headers\["Bad Name"\]: the header name is not an HTTP token/],
      [{ 'a.test': h({ Host: 'evil.test' }) }, /headers\["Host"\]: Host frames the request/],
      [{ 'a.test': h({ 'Content-Length': '0' }) }, /Content-Length frames the request/],
      [{ 'a.test': h({ A: 'x\r\nInjected: 1' }) }, /headers\["A"\]: the value holds a control character/],
      [{ 'a.test': h({ A: 'x'.repeat(9000) }) }, /longer than 8192 bytes/],
      [Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`h${i}.test`, []])), /101 domains/],
      [{ 'a.test': 'x' }, /rules\["a\.test"\] must be a list/],
      // Placeholders aenv does not fill would reach the upstream as text: identity tokens, unknown kinds, no name.
      [
        { 'a.test': h({ A: 'Bearer ${e2b.identity.tokens.aws}' }) },
        /headers\["A"\]: .*workload identity tokens/,
      ],
      [{ 'a.test': h({ A: '${e2b.env.HOME}' }) }, /headers\["A"\]: .*unknown \$\{e2b\.…\} placeholder/],
      [{ 'a.test': h({ A: '${e2b.secrets.a.b}' }) }, /headers\["A"\]: .*needs the name of a secret/],
      [['a.test'], /rules must be an object/],
    ];
    for (const [rules, message] of cases) {
      const create = await server.api('POST', '/sandboxes', { templateID: 'base', network: { rules } });
      expect(create.status).toBe(400);
      expect(create.body).toEqual({ code: 400, message: expect.stringMatching(message) });
      const put = await server.api('PUT', `/sandboxes/${sbx.sandboxId}/network`, { ...CLOSED, rules });
      expect(put.status).toBe(400);
      expect(put.body).toEqual({ code: 400, message: expect.stringMatching(message) });
    }
    // A refused update left the rules as they were.
    expect((await seen(sbx, 'https://api.allowed.test/headers')).authorization).toBe(SECRET);
  });

  describe('with a SOCKS5 egressProxy as well', () => {
    const creds = { user: 'agent', pass: 'socks-pass-never-shown' };
    const AUTH = { address: `${SOCKS}:1081`, username: creds.user, password: creds.pass };
    const PLAIN = { address: `${SOCKS}:1080` };
    const both = (egressProxy: { address: string; username?: string; password?: string }) => ({
      allowOut: ALLOWED,
      ...CLOSED,
      rules: RULES,
      egressProxy,
    });
    /** The address the fake internet's web server saw the connection come from. */
    const peer = async (sb: Sandbox, args: string) => (await run(sb, curl(args))).out;
    let auth: SocksServer | undefined;
    let plain: SocksServer | undefined;
    let psb: Sandbox;

    beforeAll(async () => {
      writeNameFiles(dir, RECORDS, DNS);
      // Bound to SOCKS for its outgoing connections: a server seeing that address was reached through it.
      auth = startSocks({ netns: net.netns, dir, ip: SOCKS, port: 1081, credentials: creds, bind: SOCKS });
      plain = startSocks({ netns: net.netns, dir, ip: SOCKS, port: 1080, bind: SOCKS });
      await eventually(() => {
        const listening = net.exec('ss', ['-ltn']);
        return listening.includes(`${SOCKS}:1080`) && listening.includes(`${SOCKS}:1081`);
      }, 'the SOCKS servers to listen');
      psb = await Sandbox.create({ timeoutMs: 300_000, network: both(AUTH) });
      await psb.files.write('/tmp/ca.pem', readFileSync(certs.ca, 'utf8'));
    });
    afterAll(async () => {
      await psb?.kill();
      auth?.proc.kill('SIGKILL');
      plain?.proc.kill('SIGKILL');
    });

    it('injects the header into requests that leave through the SOCKS5 upstream; other names pass through it', async () => {
      expect(await seen(psb, 'https://api.allowed.test/headers')).toEqual({
        host: 'api.allowed.test',
        authorization: SECRET,
      });
      expect((await seen(psb, 'http://api.allowed.test/headers')).authorization).toBe(SECRET);
      // Not intercepted (the server's own certificate), and through the upstream as well.
      expect(await seen(psb, '--cacert /tmp/ca.pem https://other.allowed.test/headers')).toEqual({
        host: 'other.allowed.test',
        authorization: null,
      });
      expect(await peer(psb, 'https://api.allowed.test/peer')).toBe(SOCKS);
      expect(await peer(psb, '--cacert /tmp/ca.pem https://other.allowed.test/peer')).toBe(SOCKS);
      // Asked for by name (the upstream resolves it); intercepted requests reuse their tunnel while it is open.
      const dialled = new Set(auth!.connectedTo());
      expect(dialled).toEqual(
        new Set(['api.allowed.test:443', 'api.allowed.test:80', 'other.allowed.test:443']),
      );
      const inside = await run(psb, `env; ${curl('-v https://api.allowed.test/ 2>&1')}`);
      expect(inside.out).toContain('tls:sni=api.allowed.test');
      expect(inside.out).not.toContain(SECRET_PART);
      const info = await server.api('GET', `/sandboxes/${psb.sandboxId}`);
      expect(info.body.network).toMatchObject({
        egressProxy: { address: AUTH.address, username: creds.user },
        rules: { 'api.allowed.test': [{ transform: { headers: { Authorization: '***' } } }] },
      });
      expect(JSON.stringify(info.body)).not.toMatch(new RegExp(`${SECRET_PART}|${creds.pass}`));
      expect(server.logs()).not.toContain(SECRET_PART);
    });

    it('never goes direct: credentials the upstream refuses fail intercepted and passed-through requests', async () => {
      await psb.updateNetwork(both({ ...AUTH, password: 'wrong' }));
      const refused = await run(psb, curl('-i https://api.allowed.test/headers'));
      // The upstream's own refusal, not a failure of some other path.
      expect(refused.out).toMatch(
        /^HTTP\/1\.1 502[\s\S]*upstream api\.allowed\.test failed: Socks5 Authentication failed/,
      );
      expect(refused.out).not.toContain(SECRET_PART);
      expect((await run(psb, curl('--cacert /tmp/ca.pem https://other.allowed.test/headers'))).exit).not.toBe(
        0,
      );
    });

    it('a live update moves between both, rules only and proxy only; a route change cuts an intercepted stream', async () => {
      await psb.updateNetwork(both(AUTH));
      const stream = await psb.commands.run(
        `${curl('-N -m 120 http://api.allowed.test/stream')} > /tmp/s.out`,
        {
          background: true,
          timeoutMs: 0,
        },
      );
      await eventually(
        async () => (await psb.files.read('/tmp/s.out').catch(() => '')).includes('line 2'),
        'the intercepted stream to flow',
        100,
        200,
      );
      await psb.updateNetwork(both(PLAIN));
      const ended = await stream.wait().then(
        (r) => r.exitCode,
        (e: unknown) => (e instanceof CommandExitError ? e.exitCode : -1),
      );
      // curl's 28 would be its own limit: the connection stayed open.
      expect([0, 28]).not.toContain(ended);
      expect((await seen(psb, 'https://api.allowed.test/headers')).authorization).toBe(SECRET);
      expect(plain!.connectedTo()).toContain('api.allowed.test:443');
      // Rules only: intercepted, dialled by the node itself.
      await psb.updateNetwork({ allowOut: ALLOWED, ...CLOSED, rules: RULES });
      expect((await seen(psb, 'https://api.allowed.test/headers')).authorization).toBe(SECRET);
      expect(await peer(psb, 'https://api.allowed.test/peer')).toBe(HOST_WAN_IP);
      // Proxy only: nothing intercepted, all through the upstream.
      await psb.updateNetwork({ allowOut: ALLOWED, ...CLOSED, egressProxy: PLAIN });
      expect(
        (await seen(psb, '--cacert /tmp/ca.pem https://api.allowed.test/headers')).authorization,
      ).toBeNull();
      expect(await peer(psb, '--cacert /tmp/ca.pem https://api.allowed.test/peer')).toBe(SOCKS);
      await psb.updateNetwork(both(PLAIN));
      expect((await seen(psb, 'https://api.allowed.test/headers')).authorization).toBe(SECRET);
      expect(await peer(psb, 'https://api.allowed.test/peer')).toBe(SOCKS);
    });

    it('with internet on, names are judged by address and other TCP is tunneled by address', async () => {
      await psb.updateNetwork({ rules: RULES, egressProxy: PLAIN });
      const before = plain!.connectedTo().length;
      expect((await seen(psb, 'https://api.allowed.test/headers')).authorization).toBe(SECRET);
      expect(await peer(psb, 'https://api.allowed.test/peer')).toBe(SOCKS);
      const echo = await run(
        psb,
        `timeout 5 bash -c 'exec 3<>/dev/tcp/${ECHO}/2222; echo hello-echo >&3; head -n1 <&3'`,
      );
      expect(echo).toEqual({ exit: 0, out: 'hello-echo\n' });
      // The rule's name went by the address the node resolved it to and judged; the raw TCP by the one dialled.
      expect(plain!.connectedTo().slice(before)).toEqual(
        expect.arrayContaining([`${WEB}:443`, `${ECHO}:2222`]),
      );
    });
  });
});
