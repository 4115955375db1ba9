// Write-back of a checkpoint's images while CRIU writes them (native/aenv-writeback.c), for a checkpoint whose
// caller syncs it at once (a durable pause): the kernel starts writing each page image as it grows, so the
// sync finds the tail left instead of every byte (docs/runtime.md, "Durable pause"). An optimisation only: a
// helper that cannot be built, started or stopped never fails the checkpoint.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildNativeHelper } from '../../../util/native-helper.js';

// packages/node/native, from src/ or dist/runtime/drivers/container.
const SOURCE = join(dirname(fileURLToPath(import.meta.url)), '../../../../native/aenv-writeback.c');

/** How long a stopped helper may take to exit before it is killed. */
const STOP_LIMIT_MS = 2_000;

/** Compiles the helper into `dir` unless this source version is there already; returns its path. */
export async function buildWriteBackHelper(dir: string, gcc = 'gcc'): Promise<string> {
  try {
    return await buildNativeHelper(SOURCE, dir, 'aenv-writeback', gcc);
  } catch (e) {
    throw new Error(`cannot build the write-back helper with ${gcc}: ${(e as Error).message}`);
  }
}

/** A running write-back of one directory. */
export interface WriteBack {
  /** Ends it; resolves once the helper has exited. Never rejects. */
  stop(): Promise<void>;
}

/** Starts handing the files of `dir` to the kernel's write-back as they grow; `onError` hears what went wrong. */
export function startWriteBack(helper: string, dir: string, onError: (err: Error) => void): WriteBack {
  const child = spawn(helper, [dir], { stdio: ['pipe', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (s: string) => {
    if (stderr.length < 4096) stderr += s;
  });
  child.stdin.on('error', () => {}); // the helper gone early: its exit says why
  const exited = new Promise<void>((resolve) => {
    child.once('error', (err) => {
      onError(err);
      resolve();
    });
    child.once('close', (code, signal) => {
      if (code !== 0 || stderr) {
        onError(new Error(`write-back helper ended with ${signal ?? `code ${code}`}: ${stderr.trim()}`));
      }
      resolve();
    });
  });
  return {
    async stop() {
      child.stdin.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_LIMIT_MS);
      await exited;
      clearTimeout(timer);
    },
  };
}
