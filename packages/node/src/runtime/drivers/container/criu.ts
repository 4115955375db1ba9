import { mkdir, readFile, rename, statfs, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { run } from '../../../util/exec.js';

/**
 * CRIU options for every dump and restore, handed to CRIU by runc (config-file settings override runc's
 * RPC settings):
 * - tcp-close: established connections (e.g. the proxy's keep-alive connections to envd) are not
 *   dumped and come back closed; with them a dump would fail, and a fork lives at another address anyway.
 *   Listening sockets are unaffected.
 * - skip-in-flight: half-open connections in a listen queue are dropped instead of failing the dump.
 * - file-locks: flock/posix locks (package managers, sqlite) are dumped instead of failing the dump.
 * - ghost-limit: deleted-but-open files up to this size are carried in the image.
 * No `network-lock`: CRIU runs inside the sandbox's netns (see Runc.checkpoint), so the netns is not part
 * of the dump and CRIU neither locks nor restores it. (`network-lock skip` in a config file also makes
 * CRIU 4.1 abort in runc's RPC mode.)
 */
export const CRIU_CONFIG = ['tcp-close', 'skip-in-flight', 'file-locks', 'ghost-limit 67108864', ''].join(
  '\n',
);

/**
 * Masked directories (`/proc/acpi`, `/sys/firmware`, …: runc covers each with an empty read-only tmpfs) as
 * external mounts: CRIU archives every tmpfs with `tar --gzip` at a dump and unpacks it at a restore, ≈ 5–7 ms
 * of process spawns each way per mount, for mounts that are empty by construction. Declared external, a dump
 * records only the mount, and a restore binds `emptyDir` (empty, read-only, root's) there, read-only as the
 * mask was. Both directions' lines are in the one file: a dump looks up `mnt[<mount point>]`, a restore
 * `mnt[<key>]`, and each ignores the other's. A checkpoint from before (the masks archived) restores as it was.
 */
export interface MaskedDirs {
  /** Mount points inside the sandbox (absolute). */
  dirs: readonly string[];
  /** Host directory bound in their place at a restore; sandbox roots must be able to reach it. */
  emptyDir: string;
}

/** The external-mount key of masked directory `dir`: `/proc/acpi` → `aenv-mask-proc-acpi`. */
export function maskKey(dir: string): string {
  return `aenv-mask${dir.replace(/[^A-Za-z0-9]+/g, '-')}`;
}

/** The CRIU config file: CRIU_CONFIG, then the external-mount lines of `masked`. */
export function criuConfig(masked?: MaskedDirs): string {
  if (!masked?.dirs.length) return CRIU_CONFIG;
  const externals = masked.dirs.flatMap((dir) => [
    `external mnt[${dir}]:${maskKey(dir)}`,
    `external mnt[${maskKey(dir)}]:${masked.emptyDir}`,
  ]);
  return `${CRIU_CONFIG}${externals.join('\n')}\n`;
}

/**
 * CRIU_FAULT=130 (FI_NO_BREAKPOINTS) makes CRIU leave the parasite by stepping syscalls instead of a
 * hardware breakpoint. On virtualised hosts whose debug registers never fire (this project's PVM guests)
 * a dump otherwise hangs forever right after "Sent msg to daemon 3"; elsewhere it costs a few ptrace stops.
 */
export const CRIU_NO_BREAKPOINTS_ENV = { CRIU_FAULT: '130' } as const;

export function defaultCriuPath(depsPath: string): string {
  return join(depsPath, 'criu', 'current', 'bin', 'criu');
}

export async function writeCriuConfig(path: string, masked?: MaskedDirs): Promise<void> {
  const config = criuConfig(masked);
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  let current: string | null = null;
  try {
    current = await readFile(path, 'utf8');
  } catch {
    // absent
  }
  if (current === config) return;
  const tmp = `${path}.tmp-${process.pid}`;
  await writeFile(tmp, config, { mode: 0o600 });
  await rename(tmp, path);
}

/** "4.1.1" from `criu --version`, or null when the binary does not run. */
export async function criuVersion(criuPath: string): Promise<string | null> {
  try {
    const { stdout } = await run(criuPath, ['--version'], { timeoutMs: 10_000 });
    return /Version:\s*(\S+)/.exec(stdout)?.[1] ?? null;
  } catch {
    return null;
  }
}

export function versionAtLeast(version: string, min: string): boolean {
  const a = version.split('.').map((x) => parseInt(x, 10) || 0);
  const b = min.split('.').map((x) => parseInt(x, 10) || 0);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d > 0;
  }
  return true;
}

/** The last `Error (...)` lines of a CRIU log: what to show when a dump or restore fails. */
export async function criuLogErrors(logFile: string, max = 4): Promise<string> {
  let text: string;
  try {
    text = await readFile(logFile, 'utf8');
  } catch {
    return '';
  }
  const errors = text
    .split('\n')
    .filter((l) => /\bError\b/.test(l))
    .map((l) => l.replace(/^\(\d+\.\d+\)\s*/, '').trim());
  return errors.slice(-max).join(' | ');
}

const TMPFS_MAGIC = 0x01021994;
export const KERNDAT_CACHE_FILE = '/run/criu.kdat';

/**
 * CRIU probes the kernel on every run (and shells out to iptables/ip6tables three times, ≈150 ms here)
 * unless it finds its cache, /run/criu.kdat — which it only ever writes when /run is a tmpfs. On hosts whose
 * /run is not one, every dump and restore paid for the probes. There we let CRIU compute the cache in a
 * private mount namespace whose /run is a tmpfs, and install the result where every CRIU reads it. Done at each
 * server start, so a new kernel or CRIU gets a fresh cache; a CRIU that cannot use it drops it and probes.
 */
export async function primeKerndatCache(criuPath: string): Promise<'native' | 'installed'> {
  if ((await statfs('/run')).type === TMPFS_MAGIC) return 'native';
  const script =
    'mount -t tmpfs -o size=1m aenv-criu-kdat /run && { "$0" check >/dev/null 2>&1; base64 -w0 /run/criu.kdat; }';
  const { stdout } = await run(
    'unshare',
    ['--mount', '--propagation', 'private', 'sh', '-c', script, criuPath],
    {
      timeoutMs: 60_000,
    },
  );
  const cache = Buffer.from(stdout.trim(), 'base64');
  if (cache.length === 0) throw new Error(`${criuPath} check wrote no ${KERNDAT_CACHE_FILE}`);
  const tmp = `${KERNDAT_CACHE_FILE}.aenv-${process.pid}`;
  await writeFile(tmp, cache, { mode: 0o600 });
  await rename(tmp, KERNDAT_CACHE_FILE);
  return 'installed';
}
