import type { Dirent, Stats } from 'node:fs';
import { chmod, lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * How `privatizeTree` treats one directory below the root: `descend` (made private, then walked), `self`
 * (only its own mode is set, its content is left alone: sandbox or image content, whose modes are the
 * sandbox's), `skip` (left alone entirely). A number is the mode to give it (then it is walked).
 */
export type TreeRule = 'descend' | 'self' | 'skip' | number;

export interface PrivatizeOptions {
  /** Rule for a directory (the root included) by absolute path; default `descend`. */
  rule?(path: string, st: Stats): TreeRule;
  /** Mode of private directories (default 0700). */
  dirMode?: number;
  /** Whether directories keep the search (x) bits they have for group and others (saved memory dirs). */
  keepSearch?: boolean;
  /** Files of a directory whose entries pass this keep read access for all (saved memory, see the runtime driver). */
  readableFilesIf?(names: string[]): boolean;
}

/**
 * Takes every access for group and others away below `root`: directories 0700 (or the rule's mode), files
 * and sockets keep only their owner's bits (no setuid/setgid/sticky). Symlinks are not followed; what
 * another filesystem mounts below (netns files, volumes) is left alone unless a rule names it. Run at every start, so trees written by older versions (or
 * by hand) are fixed too. Returns how many entries it changed.
 */
export async function privatizeTree(root: string, opts: PrivatizeOptions = {}): Promise<number> {
  let rootSt: Stats;
  try {
    rootSt = await lstat(root);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw e;
  }
  let changed = 0;
  const setMode = async (path: string, st: Stats, mode: number) => {
    if ((st.mode & 0o7777) === mode) return;
    await chmod(path, mode);
    changed++;
  };
  const dirMode = (st: Stats) => {
    const base = opts.dirMode ?? 0o700;
    return opts.keepSearch ? base | (st.mode & 0o011) : base;
  };
  const visitDir = async (path: string, st: Stats): Promise<void> => {
    // Another filesystem mounted here (a netns file, a volume) is left alone unless a rule names it.
    const rule = opts.rule?.(path, st) ?? (st.dev === rootSt.dev ? 'descend' : 'skip');
    if (rule === 'skip') return;
    await setMode(path, st, typeof rule === 'number' ? rule : dirMode(st));
    if (rule === 'self') return;
    let entries: Dirent[];
    try {
      entries = await readdir(path, { withFileTypes: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw e;
    }
    const fileMask = opts.readableFilesIf?.(entries.map((e) => e.name)) ? 0o744 : 0o700;
    for (const e of entries) {
      if (e.isSymbolicLink()) continue;
      const p = join(path, e.name);
      const est = await lstat(p).catch(() => null);
      if (!est) continue; // removed meanwhile
      if (est.isDirectory()) await visitDir(p, est);
      else if (est.dev === st.dev) await setMode(p, est, est.mode & fileMask);
    }
  };
  if (rootSt.isDirectory()) await visitDir(root, rootSt);
  else if (!rootSt.isSymbolicLink()) await setMode(root, rootSt, rootSt.mode & 0o700);
  return changed;
}

/**
 * A tree every sandbox uid must read and run (the tools dir mounted at /agentenv): directories 0755, files
 * 0644 or 0755 (when the owner may run them); never setuid, never writable by anyone but its owner.
 */
export async function makeReadOnlyForAll(root: string): Promise<void> {
  const fix = async (path: string, st: Stats, mode: number) => {
    if ((st.mode & 0o7777) !== mode) await chmod(path, mode);
  };
  const walk = async (path: string, st: Stats): Promise<void> => {
    await fix(path, st, 0o755);
    for (const e of await readdir(path, { withFileTypes: true })) {
      if (e.isSymbolicLink()) continue;
      const p = join(path, e.name);
      const est = await lstat(p);
      if (est.isDirectory()) await walk(p, est);
      else await fix(p, est, est.mode & 0o100 ? 0o755 : 0o644);
    }
  };
  await walk(root, await lstat(root));
}
