// Lazy restore (docs/runtime.md#lazy-restore): `criu lazy-pages` serves a restored sandbox's memory through
// userfaultfd, so `runc restore --lazy-pages` returns before the pages are read; the daemon then copies the
// rest in the background and exits once every page is in. One daemon per restore, owned by the restore's
// CRIU work dir: its pid file and socket live there, so whoever removes the work dir stops it first.
import { spawn } from 'node:child_process';
import { readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { hostToolEnv } from '../../../util/exec.js';
import { criuLogErrors } from './criu.js';

/** The socket CRIU's restore looks for in its work dir. */
const SOCKET = 'lazy-pages.socket';
const PID_FILE = 'lazy-pages.pid';
/** The daemon's log, in the work dir (CRIU resolves `-o` there). */
export const LAZY_PAGES_LOG = 'lazy-pages.log';
const START_TIMEOUT_MS = 10_000;

/** Bytes of memory pages a checkpoint holds (its `pages-*.img` files). */
export async function checkpointPageBytes(imagesDir: string): Promise<number> {
  let total = 0;
  for (const name of await readdir(imagesDir)) {
    if (/^pages-\d+\.img$/.test(name)) total += (await stat(join(imagesDir, name))).size;
  }
  return total;
}

/**
 * Why this host cannot restore lazily, or null when it can. The restored tasks open their userfaultfd inside
 * the sandbox's user namespace, before their credentials and seccomp filter are back: the kernel allows that
 * only with vm.unprivileged_userfaultfd = 1 (CRIU 4.2 does not ask for user-mode-only faults).
 */
export async function lazyRestoreUnavailable(): Promise<string | null> {
  let value: string;
  try {
    value = (await readFile('/proc/sys/vm/unprivileged_userfaultfd', 'utf8')).trim();
  } catch {
    return 'the kernel has no userfaultfd (no /proc/sys/vm/unprivileged_userfaultfd)';
  }
  return value === '1' ? null : `vm.unprivileged_userfaultfd = ${value}; lazy restore needs 1`;
}

/** The pid of the daemon owned by `workDir` while it runs, else null. */
async function daemonPid(workDir: string): Promise<number | null> {
  let pid: number;
  try {
    pid = Number((await readFile(join(workDir, PID_FILE), 'utf8')).trim());
  } catch {
    return null;
  }
  if (!Number.isInteger(pid) || pid <= 1) return null;
  try {
    // The pid may have been reused: it is ours only if it is a lazy-pages daemon of this work dir.
    const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0');
    return argv.includes('lazy-pages') && argv.includes(workDir) ? pid : null;
  } catch {
    return null;
  }
}

/**
 * Starts the daemon for a restore from `imagesDir` whose CRIU work dir is `workDir`, and waits until its
 * socket is there. It runs in a session of its own (a server restart does not take it down, and the
 * sandbox's missing pages would read as zeros without it) and writes its pid into the work dir.
 */
export async function startLazyPages(criuPath: string, imagesDir: string, workDir: string): Promise<number> {
  const child = spawn(
    criuPath,
    ['lazy-pages', '--images-dir', imagesDir, '--work-dir', workDir, '-o', LAZY_PAGES_LOG, '-v2'],
    { detached: true, stdio: 'ignore', env: hostToolEnv() },
  );
  let exited: number | null | undefined;
  let spawnError: Error | undefined;
  child.on('exit', (code) => (exited = code));
  child.on('error', (e) => (spawnError = e));
  child.unref();
  const pid = child.pid;
  if (pid === undefined) {
    await sleep(0);
    throw new Error(`criu lazy-pages did not start: ${spawnError?.message ?? 'no pid'}`);
  }
  await writeFile(join(workDir, PID_FILE), `${pid}\n`, { mode: 0o600 });
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    if (spawnError) throw new Error(`criu lazy-pages did not start: ${spawnError.message}`);
    if (exited !== undefined) {
      const why = await criuLogErrors(join(workDir, LAZY_PAGES_LOG));
      throw new Error(`criu lazy-pages exited with ${exited}${why ? `: ${why}` : ''}`);
    }
    if (
      await stat(join(workDir, SOCKET)).then(
        () => true,
        () => false,
      )
    )
      return pid;
    if (Date.now() > deadline) {
      await stopLazyPages(workDir);
      throw new Error(`criu lazy-pages made no socket within ${START_TIMEOUT_MS / 1000} s`);
    }
    await sleep(5);
  }
}

/** Kills the daemon of `workDir` if it still runs (its sandbox is gone or its restore failed). */
export async function stopLazyPages(workDir: string): Promise<boolean> {
  const pid = await daemonPid(workDir);
  if (pid === null) return false;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // exited meanwhile
  }
  for (let i = 0; i < 500 && (await daemonPid(workDir)) !== null; i++) await sleep(10);
  await rm(join(workDir, PID_FILE), { force: true });
  return true;
}

/**
 * Waits until the daemon of `workDir` has copied every page and exited: a dump must not start while part of
 * the memory is still only in the old images. Throws after `timeoutMs`.
 */
export async function waitLazyPages(workDir: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await daemonPid(workDir)) !== null) {
    if (Date.now() > deadline) {
      throw new Error(`the lazy restore of ${workDir} has not fetched all pages after ${timeoutMs / 1000} s`);
    }
    await sleep(20);
  }
}
