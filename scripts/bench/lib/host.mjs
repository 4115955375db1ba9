// Facts about the host the benchmark runs on: load, machine description, memory, processes.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { cpus, loadavg, release } from 'node:os';
import { performance } from 'node:perf_hooks';
import { clearInterval, setInterval } from 'node:timers';

export function currentLoad() {
  const [one, five, fifteen] = loadavg();
  return { one, five, fifteen };
}

export function formatLoad(l) {
  return `${l.one.toFixed(2)} / ${l.five.toFixed(2)} / ${l.fifteen.toFixed(2)} (1/5/15 min, ${cpus().length} cores)`;
}

/**
 * Samples the 1-minute load average every `everyMs` while the benchmark runs, so the report can say how
 * loaded the machine was (other engineers' tests share it). Bounded: at most `maxSamples` samples.
 */
export function startLoadSampler(everyMs = 5000, maxSamples = 10_000) {
  const samples = [loadavg()[0]];
  const timer = setInterval(() => {
    if (samples.length < maxSamples) samples.push(loadavg()[0]);
  }, everyMs);
  timer.unref();
  return {
    stop() {
      clearInterval(timer);
      samples.push(loadavg()[0]);
      const sorted = [...samples].sort((a, b) => a - b);
      return {
        min: sorted[0],
        max: sorted[sorted.length - 1],
        mean: samples.reduce((a, b) => a + b, 0) / samples.length,
      };
    },
  };
}

function firstLine(path) {
  try {
    return readFileSync(path, 'utf8').split('\n')[0].trim();
  } catch {
    return null;
  }
}

export function machineInfo() {
  const meminfo = readFileSync('/proc/meminfo', 'utf8');
  const totalKb = Number(/MemTotal:\s+(\d+)/.exec(meminfo)?.[1] ?? 0);
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memTotalMiB: Math.round(totalKb / 1024),
    kernel: release(),
    node: process.version,
    os: firstLine('/etc/debian_version') ? `Debian ${firstLine('/etc/debian_version')}` : 'unknown',
  };
}

/** MemAvailable in bytes (what the kernel thinks it could hand out without swapping). */
export async function memAvailableBytes() {
  const text = await readFile('/proc/meminfo', 'utf8');
  return Number(/MemAvailable:\s+(\d+)/.exec(text)?.[1] ?? NaN) * 1024;
}

/**
 * Starts a command whose children outlive it (`runc run -d`, `runc restore -d`): its stdio is /dev/null,
 * so no pipe of ours is held by the container, and it resolves on the command's own exit. stderr goes to
 * `logFile` when given, so a failure can still be explained.
 */
/** @returns {Promise<void>} */
export function runDetached(
  cmd,
  args,
  /** @type {{ env?: NodeJS.ProcessEnv, logFd?: number }} */ { env, logFd } = {},
) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      stdio: ['ignore', 'ignore', logFd ?? 'ignore'],
      env: env ?? process.env,
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (code === 0) resolve();
      else reject(new Error(`${cmd} ${args.join(' ')} exited with ${code ?? signal}`));
    });
  });
}

/** Spawns `cmd` with pipes and resolves with the wall time from spawn to close (ms). Host-side twins. */
export function timedSpawn(cmd, args, env) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env });
    let err = '';
    child.stdout.resume();
    child.stderr.on('data', (b) => (err += b));
    child.on('error', reject);
    child.on('close', (code) => {
      const ms = performance.now() - t0;
      if (code === 0) resolve(ms);
      else reject(new Error(`${cmd} ${args.join(' ')} exited with ${code}: ${err.trim().slice(-500)}`));
    });
  });
}
