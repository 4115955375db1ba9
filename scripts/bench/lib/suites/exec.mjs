// exec round trip: the SDK's commands.run('true') (envd runs `bash -l -c true` as `user`) next to
//  - raw: a node process already inside the same sandbox (same rootfs, user, namespaces, cgroup, seccomp)
//    spawning `bash -l -c true` and timing it itself — the floor envd works against, minus the RPC;
//  - `chroot <sandbox rootfs> bash -l -c true` spawned from the host (host root, host namespaces);
//  - host spawn('/bin/true') from this process.
// and the same RPC from a plain Connect client (the node's own envd client: @connectrpc/connect-node, HTTP/1.1,
// the SDK's route and headers), which shows what the SDK itself adds on the client side.
import { performance } from 'node:perf_hooks';
import { Sandbox } from 'e2b';
import { timedSpawn } from '../host.mjs';
import { EnvdRpcClient } from '../product.mjs';
import { sandboxRoot } from '../sandbox-facts.mjs';

const CHUNK = 10;
const HELPER_PATH = '/tmp/aenv-bench-spawn.js';
// Runs inside the sandbox with the tools' node (the binary envd uses); prints its samples as JSON.
const HELPER = `
const { spawn } = require('child_process');
const n = Number(process.argv[2]);
const once = () => new Promise((resolve, reject) => {
  const t0 = process.hrtime.bigint();
  const c = spawn('/bin/bash', ['-l', '-c', 'true'], { stdio: ['ignore', 'pipe', 'pipe'] });
  c.stdout.resume(); c.stderr.resume();
  c.on('error', reject);
  c.on('close', (code) => code === 0 ? resolve(Number(process.hrtime.bigint() - t0) / 1e6) : reject(new Error('exit ' + code)));
});
(async () => { const out = []; for (let i = 0; i < n; i++) out.push(await once()); console.log(JSON.stringify(out)); })();
`;

export async function execSuite(ctx) {
  const { report, opts } = ctx;
  const main = await ctx.mainNode();
  const sbx = await Sandbox.create({ ...main.sdk, timeoutMs: 600_000 });
  try {
    await sbx.files.write(HELPER_PATH, HELPER);
    const rootfs = sandboxRoot(main, sbx.sandboxId);
    const chrootEnv = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/root' };
    const s = { sdk: [], connect: [], inSandbox: [], chroot: [], hostTrue: [] };
    /** @type {string | undefined} the SDK keeps it protected; a secure sandbox's envd wants it */
    const token = /** @type {any} */ (sbx).envdAccessToken;
    const client = new EnvdRpcClient({
      baseUrl: main.sdk.sandboxUrl,
      headers: { 'e2b-sandbox-id': sbx.sandboxId, 'e2b-sandbox-port': '49983' },
      ...(token ? { accessToken: token } : {}),
    });
    const rounds = {
      inSandbox: async (k) =>
        JSON.parse((await sbx.commands.run(`/agentenv/bin/node ${HELPER_PATH} ${k}`)).stdout),
      sdk: async (k) => {
        const out = [];
        for (let i = 0; i < k; i++) {
          const t0 = performance.now();
          await sbx.commands.run('true');
          out.push(performance.now() - t0);
        }
        return out;
      },
      connect: async (k) => {
        const out = [];
        for (let i = 0; i < k; i++) {
          const t0 = performance.now();
          const r = await client.run({ cmd: '/bin/bash', args: ['-l', '-c', 'true'], user: 'user' });
          out.push(performance.now() - t0);
          if (r.exitCode !== 0) throw new Error(`bash -l -c true through a plain client: ${r.status}`);
        }
        return out;
      },
      chroot: async (k) => {
        const out = [];
        for (let i = 0; i < k; i++)
          out.push(await timedSpawn('chroot', [rootfs, '/bin/bash', '-l', '-c', 'true'], chrootEnv));
        return out;
      },
      hostTrue: async (k) => {
        const out = [];
        for (let i = 0; i < k; i++) out.push(await timedSpawn('/bin/true', []));
        return out;
      },
    };
    const order = Object.keys(rounds);
    for (const name of order) await rounds[name](5); // warm-up, dropped
    // Chunks of CHUNK samples per method, the method order rotating per chunk.
    for (let done = 0, c = 0; done < opts.execN; done += CHUNK, c++) {
      const k = Math.min(CHUNK, opts.execN - done);
      for (let j = 0; j < order.length; j++) {
        const name = order[(j + c) % order.length];
        s[name].push(...(await rounds[name](k)));
      }
    }
    const target = { maxRatio: 1.3, text: '≤ 1.3× raw bash -l in the sandbox' };
    report.add({
      suite: 'exec',
      op: "commands.run('true')",
      aenv: s.sdk,
      baseline: 'bash -l -c true spawned inside the same sandbox',
      raw: s.inSandbox,
      target,
      note: "Raw = the tools' node (envd's binary) inside the sandbox, as `user`, timing spawn → exit of `bash -l -c true` itself: no RPC, no HTTP, no proxy.",
    });
    report.add({
      suite: 'exec',
      op: 'the same RPC from a plain Connect client (no SDK)',
      aenv: s.connect,
      baseline: 'bash -l -c true spawned inside the same sandbox',
      raw: s.inSandbox,
      note: "process.Process/Start of `/bin/bash -l -c true` as `user` with @connectrpc/connect-node over HTTP/1.1, through the node's proxy with the SDK's routing headers: the difference to the row above is the SDK's own client-side work.",
    });
    report.add({
      suite: 'exec',
      op: "commands.run('true')",
      aenv: s.sdk,
      baseline: 'host: chroot <sandbox rootfs> bash -l -c true',
      raw: s.chroot,
    });
    report.add({
      suite: 'exec',
      op: "commands.run('true')",
      aenv: s.sdk,
      baseline: "host: spawn('/bin/true')",
      raw: s.hostTrue,
    });
  } finally {
    await sbx.kill().catch(() => {});
  }
}
