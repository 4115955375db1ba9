// Benchmark (not a test; needs root): the e2b SDK's exec round trip through envd vs a raw spawn of the
// same login shell from a Node process of the same kind inside the same sandbox, plus envd's memory.
//   npx tsx packages/envd/scripts/bench-envd.mts [--n 30] [--rounds 4] [--flags "<node flags>"]
// envd runs as in a sandbox: aenv-init as PID 1 of a mount+PID namespace chrooted into a small rootfs.
// The baseline is /agentenv/bin/node (same binary and flags as envd) spawning `bash -l -c true` with
// pipes, inside the same kind of namespace. Samples alternate (one raw, one SDK) so both see the same noise.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildTestTools } from '../src/testing/tools.js';
import { buildTestRootfs } from '../src/testing/rootfs.js';
import { startSandboxEnvd, type RunningTestEnvd } from '../src/testing/envd-process.js';
import { initEnvd, sdkSandbox } from '../src/testing/sdk.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1]! : def;
};
const n = Number(arg('--n', '30'));
const rounds = Number(arg('--rounds', '4'));
const flagsOverride = arg('--flags', '');
const SCRIPT = fileURLToPath(new URL('../src/testing/run-in-sandbox.sh', import.meta.url));

function stats(xs: number[]): string {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
  return `min ${s[0]!.toFixed(2)} / median ${q(0.5).toFixed(2)} / p95 ${q(0.95).toFixed(2)} ms`;
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

function memory(pid: number): string {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (re: RegExp) => Number(re.exec(status)?.[1] ?? NaN) / 1024;
  return `RSS ${kb(/VmRSS:\s+(\d+)/).toFixed(1)} MB = anon ${kb(/RssAnon:\s+(\d+)/).toFixed(1)} MB + file ${kb(/RssFile:\s+(\d+)/).toFixed(1)} MB (node binary, shared by all sandboxes)`;
}

// Runs inside the sandbox; spawns `bash -l -c true` once per line read from stdin and answers the time.
const BASELINE = `
const { spawn } = require('child_process');
const once = () => new Promise((r) => { const c = spawn('/bin/bash', ['-l', '-c', 'true'], { stdio: ['ignore', 'pipe', 'pipe'] }); c.stdout.resume(); c.stderr.resume(); c.on('close', r); });
let queue = Promise.resolve();
require('readline').createInterface({ input: process.stdin }).on('line', () => {
  queue = queue.then(async () => { const t = process.hrtime.bigint(); await once(); process.stdout.write(String(Number(process.hrtime.bigint() - t) / 1e6) + '\\n'); });
});
`;

/** The baseline process inside a sandbox namespace; sample() runs one raw spawn there. */
function startBaseline(rootfs: string, toolsDir: string, flags: string[]) {
  const child = spawn(SCRIPT, [rootfs, toolsDir, '/agentenv/bin/node', ...flags, '/bench-baseline.js'], {
    env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  let buf = '';
  const waiting: ((ms: number) => void)[] = [];
  child.stdout.on('data', (b: Buffer) => {
    buf += b.toString();
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      waiting.shift()?.(Number(line));
    }
  });
  return {
    sample: () =>
      new Promise<number>((resolve) => {
        waiting.push(resolve);
        child.stdin.write('go\n');
      }),
    stop: () => {
      child.stdin.end();
      child.kill('SIGTERM');
    },
  };
}

const deps = mkdtempSync('/tmp/aenv-envd-bench-');
const rootfs = mkdtempSync('/tmp/aenv-envd-bench-rootfs-');
let envd: RunningTestEnvd | undefined;
try {
  const tools = await buildTestTools(deps);
  const flags = flagsOverride
    ? flagsOverride.split(/\s+/)
    : readFileSync(join(tools.dir, 'envd', 'node-flags'), 'utf8')
        .split('\n')
        .filter(Boolean);
  if (flagsOverride) writeFileSync(join(tools.dir, 'envd', 'node-flags'), flags.join('\n'));
  buildTestRootfs(rootfs, { hostBash: true });
  writeFileSync(join(rootfs, 'bench-baseline.js'), BASELINE);
  envd = await startSandboxEnvd(rootfs, tools.dir);
  await initEnvd(envd.url, { defaultUser: 'user' });
  const sbx = sdkSandbox(envd.url);
  const envdPid = Number(
    readFileSync(`/proc/${envd.pid}/task/${envd.pid}/children`, 'utf8').trim().split(/\s+/)[0],
  );
  console.log(`node flags: ${flags.join(' ')}`);
  await new Promise((r) => setTimeout(r, 2000));
  console.log(`envd idle after start:       ${memory(envdPid)}`);

  const base = startBaseline(rootfs, tools.dir, flags);
  const raw: number[] = [];
  const sdk: number[] = [];
  try {
    for (let i = 0; i < 5; i++) {
      await base.sample();
      await sbx.commands.run('true');
    }
    // Alternate the two, one sample each, so both see the same machine noise.
    for (let i = 0; i < n * rounds; i++) {
      raw.push(await base.sample());
      const t = performance.now();
      await sbx.commands.run('true');
      sdk.push(performance.now() - t);
    }
  } finally {
    base.stop();
  }
  console.log(`raw spawn bash -l -c true (node in the sandbox, as user root)  ${stats(raw)}`);
  console.log(`SDK commands.run('true') through envd (as user 'user')         ${stats(sdk)}`);
  console.log(
    `  envd + SDK overhead: ${(median(sdk) - median(raw)).toFixed(2)} ms per command (ratio ${(median(sdk) / median(raw)).toFixed(2)})`,
  );

  const time = async (fn: () => Promise<unknown>) => {
    const out: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      await fn();
      out.push(performance.now() - t);
    }
    return stats(out);
  };
  const text = 'x'.repeat(4096);
  console.log(`SDK files.write 4 KiB        ${await time(() => sbx.files.write('bench.txt', text))}`);
  console.log(`SDK files.read 4 KiB         ${await time(() => sbx.files.read('bench.txt'))}`);
  console.log(`SDK files.getInfo            ${await time(() => sbx.files.getInfo('bench.txt'))}`);
  console.log(`SDK files.list (depth 1)     ${await time(() => sbx.files.list('/usr/bin'))}`);
  await new Promise((r) => setTimeout(r, 3000));
  console.log(`envd idle after the run:     ${memory(envdPid)}`);
} finally {
  await envd?.stop();
  rmSync(rootfs, { recursive: true, force: true });
  rmSync(deps, { recursive: true, force: true });
}
