// Benchmark (not a test): exec round trip through envd vs a raw spawn, and envd's idle memory.
//   npx tsx packages/envd/scripts/bench-envd.mts [--n 50] [--sandbox]
// --sandbox runs envd under aenv-init in a chrooted mount+PID namespace (needs root), else on the host.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { buildTestTools } from '../src/testing/tools.js';
import { buildTestRootfs } from '../src/testing/rootfs.js';
import { startHostEnvd, startSandboxEnvd, type RunningTestEnvd } from '../src/testing/envd-process.js';
import { initEnvd, sdkSandbox } from '../src/testing/sdk.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1]! : def;
};
const n = Number(arg('--n', '50'));
const inSandbox = process.argv.includes('--sandbox');

function stats(xs: number[]): string {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
  return `min ${s[0]!.toFixed(2)} / median ${q(0.5).toFixed(2)} / p95 ${q(0.95).toFixed(2)} ms`;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function time(fn: () => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < 5; i++) await fn();
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    out.push(performance.now() - t);
  }
  return out;
}

function rawSpawn(cmd: string, args: string[], chroot?: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const c = chroot
      ? spawn('chroot', [chroot, cmd, ...args], { stdio: 'ignore' })
      : spawn(cmd, args, { stdio: 'ignore' });
    c.on('error', reject);
    c.on('close', () => resolve());
  });
}

function memory(pid: number): string {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const kb = (re: RegExp, text: string) => Number(re.exec(text)?.[1] ?? NaN) / 1024;
  return `RSS ${kb(/VmRSS:\s+(\d+)/, status).toFixed(1)} MB (anon ${kb(/RssAnon:\s+(\d+)/, status).toFixed(1)}, file ${kb(/RssFile:\s+(\d+)/, status).toFixed(1)}), PSS ${kb(/^Pss:\s+(\d+)/m, rollup).toFixed(1)} MB`;
}

const deps = mkdtempSync('/tmp/aenv-envd-bench-');
let rootfs: string | undefined;
let envd: RunningTestEnvd | undefined;
try {
  const tools = await buildTestTools(deps);
  if (inSandbox) {
    rootfs = mkdtempSync('/tmp/aenv-envd-bench-rootfs-');
    buildTestRootfs(rootfs, { hostBash: true });
    envd = await startSandboxEnvd(rootfs, tools.dir);
  } else {
    envd = await startHostEnvd(tools.dir);
  }
  await initEnvd(envd.url, { defaultUser: 'root' });
  const sbx = sdkSandbox(envd.url);
  const envdPid = inSandbox
    ? Number(readFileSync(`/proc/${envd.pid}/task/${envd.pid}/children`, 'utf8').trim().split(/\s+/)[0])
    : envd.pid;

  await new Promise((r) => setTimeout(r, 2000));
  console.log(`envd idle after start: ${memory(envdPid)}`);

  const spawnTrue = await time(() => rawSpawn('/bin/true', []));
  const spawnBash = await time(() => rawSpawn('/bin/bash', ['-l', '-c', 'true'], rootfs));
  const sdkTrue = await time(() => sbx.commands.run('true'));
  const sdkTrueDirect = await time(() => sbx.commands.run('/bin/true'));
  console.log(`host spawn('/bin/true')            ${stats(spawnTrue)}`);
  console.log(`raw bash -l -c true${inSandbox ? ' (chroot)' : '          '}    ${stats(spawnBash)}`);
  console.log(`SDK commands.run('true')           ${stats(sdkTrue)}`);
  console.log(
    `  overhead vs raw bash -l -c true: ${(median(sdkTrue) - median(spawnBash)).toFixed(2)} ms (ratio ${(median(sdkTrue) / median(spawnBash)).toFixed(2)})`,
  );
  console.log(`SDK commands.run('/bin/true')      ${stats(sdkTrueDirect)}`);

  const text = 'x'.repeat(4096);
  const write = await time(() => sbx.files.write('/tmp/bench.txt', text));
  const read = await time(() => sbx.files.read('/tmp/bench.txt'));
  const stat = await time(() => sbx.files.getInfo('/tmp/bench.txt'));
  console.log(`SDK files.write 4 KiB              ${stats(write)}`);
  console.log(`SDK files.read 4 KiB               ${stats(read)}`);
  console.log(`SDK files.getInfo                  ${stats(stat)}`);

  await new Promise((r) => setTimeout(r, 3000));
  console.log(`envd idle after the benchmark: ${memory(envdPid)}`);
} finally {
  await envd?.stop();
  if (rootfs) rmSync(rootfs, { recursive: true, force: true });
  rmSync(deps, { recursive: true, force: true });
}
