import { createRequire } from 'node:module';

/** The functions of `aenv_native.node` (see native/aenv_native.c). */
export interface NativeApi {
  /** Calls fn with this thread's fs credentials switched to uid/gid/groups; restores them afterwards. */
  runAs<T>(uid: number, gid: number, groups: readonly number[], fn: () => T): T;
  /** xattrs of path (not following symlinks) whose names start with prefix, prefix removed. */
  getXattrs(path: string, prefix: string): Record<string, string>;
  setXattr(path: string, name: string, value: string): void;
  removeXattr(path: string, name: string): void;
  /** Starts the single inotify reader; events arrive as [wd, mask, cookie, name] tuples. */
  watchStart(onEvents: (events: [number, number, number, string][]) => void): void;
  watchAdd(path: string, mask: number): number;
  watchRemove(wd: number): void;
  /**
   * posix_spawn in a new session; fds are envd's ends of the pipes (stdin -1 when /dev/null). With `as`, a vfork
   * child takes that user's credentials and oom score and execs file itself, found on envp's PATH as execvp does.
   */
  spawn(
    file: string,
    argv: string[],
    envp: string[],
    cwd: string,
    pipeStdin: boolean,
    onExit: (code: number, signal: number) => void,
    as?: SpawnUser,
  ): { pid: number; stdin: number; stdout: number; stderr: number };
}

/** Who a spawned process runs as: uid, gid and supplementary groups, and its oom_score_adj. */
export interface SpawnUser {
  uid: number;
  gid: number;
  groups: readonly number[];
  oomScoreAdj?: number;
}

/** Loads the addon from an absolute path (it ships in the tools dir next to envd.cjs). */
export function loadNative(addonPath: string): NativeApi {
  const require = createRequire(addonPath);
  return require(addonPath) as NativeApi;
}
