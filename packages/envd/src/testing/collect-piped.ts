import type { PipedChild } from '../process/spawn-piped.js';

/** Reads a piped child to its end: its exit, and all it wrote to stdout and stderr. */
export async function collectPiped(child: PipedChild) {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on('data', (b: Buffer) => out.push(b));
  child.stderr.on('data', (b: Buffer) => err.push(b));
  // Listen for the ends before awaiting the exit: the pipes may close while we wait.
  const closed = Promise.all([
    new Promise((r) => child.stdout.once('close', r)),
    new Promise((r) => child.stderr.once('close', r)),
  ]);
  const exit = await child.exited;
  await closed;
  return { exit, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() };
}
