// Network attack class (docs/security.md, "Network"): a sandbox never gets more network than its policy gives,
// at no instant of its life. Against a real server and the real e2b SDK; the "internet" is a namespace this test
// builds with documentation-range addresses (test/e2e/fixtures/fake-internet.ts), nothing leaves the machine.
//
// The node runs with:
//  - AENV_FAULT_POLICY_DELAY_MS: every slot's first policy lands 3 s late, so a sandbox process that ran before
//    its policy was in place would have seconds to get out (without it the window is a few ms);
//  - always_denied_cidrs = []: the built-in denies must hold without it;
//  - its resolver inside the fake internet, to see where DNS may go;
//  - resident_pause_grace_secs = 0: a resume restores from disk into a new slot.
import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, type SandboxOpts } from 'e2b';
import { eventually, startServer, useSdk, type TestServer } from '../e2e/harness.js';
import {
  METADATA_IP,
  WAN_A,
  WAN_B,
  WAN_PORT,
  startFakeInternet,
  type FakeInternet,
} from '../e2e/fixtures/fake-internet.js';

/** The node's resolver, in the fake internet: echoes on UDP and TCP 53. */
const RESOLVER = '198.51.100.53';
/** TCP echo on WAN_A and WAN_B (port 53 echoes on WAN_A too: "a resolver of the sandbox's choosing"). */
const ECHO_PORT = 9000;
/** Other metadata services of the built-in denies, played by the fake internet on port 80. */
const ALIBABA_METADATA = '100.100.100.200';
const AZURE_WIRESERVER = '168.63.129.16';
/** A private address (in the default always_denied_cidrs, which this node empties): reachable here. */
const PRIVATE_HOST = '172.16.5.5';
const POLICY_DELAY_MS = 3000;

// Echo and HTTP listeners inside the fake internet.
const EXTRA_SERVICES = `
const net = require('net'), dgram = require('dgram'), http = require('http');
const [tcpEcho, udpEcho, web] = JSON.parse(process.argv[1]);
let pending = tcpEcho.length + udpEcho.length + web.length;
const up = () => { if (--pending === 0) console.log('ready'); };
for (const [h, p] of tcpEcho) net.createServer((s) => { s.on('error', () => {}); s.pipe(s); }).listen(p, h, up);
for (const [h, p] of udpEcho) {
  const u = dgram.createSocket('udp4');
  u.on('message', (m, r) => u.send(m, r.port, r.address));
  u.bind(p, h, up);
}
for (const [h, p] of web) http.createServer((q, r) => r.end('answered by ' + h)).listen(p, h, up);`;

// In the sandbox: one attempt per target (connect, send, read the echo), as JSON. "ok" means it got out.
const PROBE_PY = `
import json, socket, sys
def one(t):
    kind, host, port = t
    try:
        if kind == 'udp':
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(3)
            s.connect((host, port))
            s.send(b'ping')
            return 'ok' if s.recv(64) == b'ping' else 'garbled'
        s = socket.create_connection((host, port), timeout=3)
        s.settimeout(3)
        s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n' if kind == 'http' else b'ping')
        data = s.recv(256)
        return 'ok' if data else 'closed'
    except ConnectionRefusedError:
        return 'refused'
    except socket.timeout:
        return 'timeout'
    except OSError as e:
        return 'unreachable' if e.errno == 113 else 'error %s' % e.errno
print(json.dumps([one(t) for t in json.loads(sys.argv[1])]))
`;

// In the sandbox: connects to host:port every 20 ms (bounded: 6000 attempts) and appends the outcome to a file
// in the home directory, which forks, snapshots and pauses carry along with the process.
const LOOP_PY = `
import socket, sys, time
host, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for _ in range(6000):
    try:
        socket.create_connection((host, port), timeout=1).close()
        r = 'ok'
    except ConnectionRefusedError:
        r = 'refused'
    except OSError:
        r = 'error'
    with open(log, 'a') as f:
        f.write(r + '\\n')
    time.sleep(0.02)
`;

// In the sandbox: holds a TCP connection to each target; for every file holder-go-N it sends a byte on each and
// writes holder-res-N: "ok" when the echo came back, else what happened.
const HOLDER_PY = `
import json, os, socket, sys, time
socks = []
for host, port in json.loads(sys.argv[1]):
    s = socket.create_connection((host, port), timeout=3)
    s.settimeout(3)
    socks.append(s)
open('holder-ready', 'w').close()
def one(s):
    try:
        s.sendall(b'x')
        return 'ok' if s.recv(16) == b'x' else 'closed'
    except socket.timeout:
        return 'timeout'
    except ConnectionResetError:
        return 'reset'
    except OSError as e:
        return 'error %s' % e.errno
for i in range(10):
    for _ in range(3000):
        if os.path.exists('holder-go-%d' % i):
            break
        time.sleep(0.02)
    else:
        break
    with open('holder-res.tmp', 'w') as f:
        json.dump([one(s) for s in socks], f)
    os.rename('holder-res.tmp', 'holder-res-%d' % i)
`;

type Target = ['tcp' | 'udp' | 'http', string, number];
const BLOCKED = /^(refused|unreachable)$/;

async function probe(sbx: Sandbox, targets: Target[]): Promise<string[]> {
  await sbx.files.write('probe.py', PROBE_PY);
  const r = await sbx.commands.run(`python3 probe.py '${JSON.stringify(targets)}'`, { timeoutMs: 60_000 });
  return JSON.parse(r.stdout) as string[];
}

describe('network policy at every instant', () => {
  let server: TestServer;
  let net: FakeInternet;
  let services: ChildProcess | undefined;
  const sandboxes: Sandbox[] = [];
  const track = (s: Sandbox) => (sandboxes.push(s), s);
  const create = async (opts: SandboxOpts = {}) =>
    track(await Sandbox.create({ timeoutMs: 300_000, ...opts }));
  const putNetwork = async (sbx: Sandbox, body: unknown) => {
    const r = await server.api('PUT', `/sandboxes/${sbx.sandboxId}/network`, body);
    expect(r.status, JSON.stringify(r.body)).toBe(204);
  };

  beforeAll(async () => {
    server = await startServer({
      name: 'snet1',
      env: { AENV_FAULT_POLICY_DELAY_MS: String(POLICY_DELAY_MS) },
      toml: [
        '[network.egress]',
        'always_denied_cidrs = []',
        '[network.dns]',
        `nameserver = "${RESOLVER}"`,
        '[orchestrator]',
        'resident_pause_grace_secs = 0',
      ].join('\n'),
    });
    useSdk(server);
    net = await startFakeInternet(server.cidrs);
    for (const a of [RESOLVER, ALIBABA_METADATA, AZURE_WIRESERVER, PRIVATE_HOST])
      net.exec('ip', ['addr', 'add', `${a}/32`, 'dev', 'wan0']);
    services = spawn(
      'nsenter',
      [
        `--net=${net.netns}`,
        process.execPath,
        '-e',
        EXTRA_SERVICES,
        JSON.stringify([
          [
            [RESOLVER, 53],
            [WAN_A, 53],
            [WAN_A, ECHO_PORT],
            [WAN_B, ECHO_PORT],
          ],
          [
            [RESOLVER, 53],
            [WAN_A, 53],
          ],
          [
            [ALIBABA_METADATA, 80],
            [AZURE_WIRESERVER, 80],
            [PRIVATE_HOST, 80],
          ],
        ]),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    await new Promise<void>((resolve, reject) => {
      services!.stdout!.on('data', (b: Buffer) => b.toString().includes('ready') && resolve());
      services!.on('exit', (code) => reject(new Error(`fake internet services exited ${code}`)));
    });
  });

  afterAll(async () => {
    await Promise.all(sandboxes.map((s) => s.kill().catch(() => {})));
    const code = await server?.shutdown();
    if (services?.pid && services.exitCode === null) process.kill(services.pid, 'SIGKILL');
    await net?.close();
    expect(code).toBe(0);
  });

  it('fork children, snapshot launches and resumes from disk never reach out before their policy is in place', async () => {
    // A parent with internet off tries to connect out every 20 ms, and keeps doing so in every copy of it.
    const parent = await create({ allowInternetAccess: false });
    await parent.files.write('loop.py', LOOP_PY);
    await parent.commands.run(`python3 loop.py ${WAN_A} ${WAN_PORT} attempts.log`, {
      background: true,
      timeoutMs: 0,
    });
    const attempts = async (sbx: Sandbox) =>
      (await sbx.files.read('attempts.log').catch(() => '')).split('\n').filter(Boolean);
    await eventually(async () => (await attempts(parent)).length >= 5, 'the parent loop', 200, 100);
    expect(new Set(await attempts(parent))).toEqual(new Set(['refused']));

    const snapshot = await parent.createSnapshot();
    const forks = await parent.fork({ count: 1, timeoutMs: 300_000 });
    const forked = forks[0];
    if (!(forked instanceof Sandbox)) throw forked;
    track(forked);
    const launched = track(
      await Sandbox.create(snapshot.snapshotId, { timeoutMs: 300_000, allowInternetAccess: false }),
    );
    expect(await parent.pause()).toBe(true);
    await parent.connect({ timeoutMs: 300_000 });

    for (const [what, sbx] of [
      ['fork child', forked],
      ['snapshot launch', launched],
      ['resumed from disk', parent],
    ] as const) {
      const atStart = (await attempts(sbx)).length;
      await eventually(async () => (await attempts(sbx)).length >= atStart + 10, `the loop in the ${what}`);
      const outcomes = await attempts(sbx);
      expect(
        outcomes.filter((o) => o === 'ok'),
        `connections that got out of the ${what}`,
      ).toEqual([]);
    }
  });

  it('with internet on, a fork child is never refused: its policy is in place before it runs', async () => {
    const parent = await create();
    await parent.files.write('loop.py', LOOP_PY);
    await parent.commands.run(`python3 loop.py ${WAN_A} ${WAN_PORT} attempts.log`, {
      background: true,
      timeoutMs: 0,
    });
    const attempts = async (sbx: Sandbox) =>
      (await sbx.files.read('attempts.log').catch(() => '')).split('\n').filter(Boolean);
    await eventually(async () => (await attempts(parent)).length >= 5, 'the parent loop', 200, 100);
    const [child] = await parent.fork({ count: 1, timeoutMs: 300_000 });
    if (!(child instanceof Sandbox)) throw child;
    track(child);
    const atStart = (await attempts(child)).length;
    await eventually(async () => (await attempts(child)).length >= atStart + 10, 'the loop in the child');
    expect(new Set(await attempts(child))).toEqual(new Set(['ok']));
  });

  it('DNS is no tunnel: none with internet off, only to the node resolver with it on', async () => {
    const [off, on] = await Promise.all([create({ allowInternetAccess: false }), create()]);
    expect((await on.commands.run('cat /etc/resolv.conf')).stdout).toContain(`nameserver ${RESOLVER}`);
    const dns: Target[] = [
      ['udp', RESOLVER, 53],
      ['tcp', RESOLVER, 53],
      ['udp', WAN_A, 53],
      ['tcp', WAN_A, 53],
    ];
    const [offResults, onResults] = await Promise.all([probe(off, dns), probe(on, dns)]);
    for (const r of offResults) expect(r).toMatch(BLOCKED);
    expect(onResults.slice(0, 2)).toEqual(['ok', 'ok']);
    for (const r of onResults.slice(2)) expect(r).toMatch(BLOCKED);
    // Turning internet off on a running sandbox takes DNS with it...
    await putNetwork(on, { allow_internet_access: false });
    for (const r of await probe(on, dns)) expect(r).toMatch(BLOCKED);
    // ...and only allowOut naming the resolver gives it back.
    await putNetwork(off, { allow_internet_access: false, allowOut: [RESOLVER] });
    const allowed = await probe(off, dns);
    expect(allowed.slice(0, 2)).toEqual(['ok', 'ok']);
    for (const r of allowed.slice(2)) expect(r).toMatch(BLOCKED);
  });

  it('a stricter policy cuts the connections it denies, and keeps the others', async () => {
    const sbx = await create();
    await sbx.files.write('holder.py', HOLDER_PY);
    const targets = [
      [WAN_A, ECHO_PORT],
      [WAN_B, ECHO_PORT],
      [RESOLVER, 53],
    ];
    await sbx.commands.run(`python3 holder.py '${JSON.stringify(targets)}'`, {
      background: true,
      timeoutMs: 0,
    });
    await eventually(async () => sbx.files.exists('holder-ready'), 'the connections', 200, 100);
    let round = 0;
    const exchange = async () => {
      const n = round++;
      await sbx.files.write(`holder-go-${n}`, '');
      await eventually(async () => sbx.files.exists(`holder-res-${n}`), `exchange ${n}`, 200, 100);
      return JSON.parse(await sbx.files.read(`holder-res-${n}`)) as string[];
    };
    expect(await exchange()).toEqual(['ok', 'ok', 'ok']);
    await putNetwork(sbx, { denyOut: [WAN_B] });
    const afterDeny = await exchange();
    expect(afterDeny[0]).toBe('ok');
    expect(afterDeny[1]).not.toBe('ok');
    expect(afterDeny[2]).toBe('ok');
    await putNetwork(sbx, { allow_internet_access: false, allowOut: [WAN_A] });
    const afterOff = await exchange();
    expect(afterOff[0]).toBe('ok');
    expect(afterOff[2]).not.toBe('ok');
  });

  it('the metadata denies hold with always_denied_cidrs empty, and allowOut cannot open them', async () => {
    const sbx = await create();
    const metadata: Target[] = [
      ['http', METADATA_IP, 80],
      ['http', ALIBABA_METADATA, 80],
      ['http', AZURE_WIRESERVER, 80],
    ];
    // The emptied list is in force (a private address is reachable), the built-in denies are not affected.
    const [privateHost, ...denied] = await probe(sbx, [['http', PRIVATE_HOST, 80], ...metadata]);
    expect(privateHost).toBe('ok');
    for (const r of denied) expect(r).toMatch(BLOCKED);
    await putNetwork(sbx, { allowOut: [METADATA_IP, ALIBABA_METADATA, '168.63.0.0/16'] });
    for (const r of await probe(sbx, metadata)) expect(r).toMatch(BLOCKED);
    await putNetwork(sbx, { allow_internet_access: false, allowOut: ['169.254.0.0/16', ALIBABA_METADATA] });
    for (const r of await probe(sbx, metadata)) expect(r).toMatch(BLOCKED);
  });
});
