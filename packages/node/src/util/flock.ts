import { spawn } from 'node:child_process';

export type FlockMode = 'shared' | 'exclusive';

/** flock could not be taken (timeout, or util-linux `flock` missing or failing). */
export class FlockError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'FlockError';
  }
}

export interface HeldFlock {
  release(): Promise<void>;
}

/**
 * Takes flock(2) on `path` through util-linux `flock`, which holds the lock while its `cat` child runs.
 * Node has no flock of its own. The lock lives exactly as long as our pipe to `cat`: releasing closes it,
 * and if this process dies the kernel closes it too, `cat` exits and the lock is gone — no stale locks,
 * no lease guessing. We know the lock is held when `cat` echoes the byte we wrote (it runs only after
 * flock got the lock). On a shared NFS directory, Linux maps flock to NFS byte-range locks.
 */
export function acquireFlock(path: string, mode: FlockMode, timeoutMs: number): Promise<HeldFlock> {
  const seconds = Math.max(0.001, timeoutMs / 1000).toFixed(3);
  const child = spawn(
    'flock',
    [mode === 'shared' ? '--shared' : '--exclusive', '--wait', seconds, path, 'cat'],
    {
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (s: string) => (stderr += s));
  child.stdin.on('error', () => {});
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));

  return new Promise<HeldFlock>((resolve, reject) => {
    let acquired = false;
    child.stdout.once('data', () => {
      acquired = true;
      child.stdout.resume();
      // A held lock does not keep this process alive: one that has nothing else left to do (a server that
      // failed to start) exits, and the kernel lets go of the lock with it.
      const handles = [child, child.stdin, child.stdout, child.stderr] as unknown as {
        ref(): void;
        unref(): void;
      }[];
      for (const h of handles) h.unref();
      resolve({
        release: async () => {
          // Releasing is work in progress: waiting for `cat` to exit keeps the process alive again.
          for (const h of handles) h.ref();
          child.stdin.end();
          await exited;
        },
      });
    });
    child.once('error', (err) => {
      if (acquired) return;
      reject(
        new FlockError(`cannot run flock (util-linux) for lock ${path}: ${err.message}`, {
          cause: err,
        }),
      );
    });
    child.once('close', (code) => {
      if (acquired) return;
      const why =
        code === 1 && !stderr.trim()
          ? `timed out after ${timeoutMs} ms waiting for lock ${path}`
          : `flock on ${path} failed (exit ${code ?? 'signal'}): ${stderr.trim()}`;
      reject(new FlockError(why));
    });
    child.stdin.write('L\n');
  });
}
