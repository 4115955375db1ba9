// The node's long-lived helper processes (the hostname setter, the nftables session): requests on stdin,
// answers on stdout in order, stderr kept for the error that ends them.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import type { Socket } from 'node:net';

/**
 * Starts `argv` with piped stdio; `gone(why)` when it could not run or has exited (possibly twice: callers fail
 * what they were waiting for, once). Idle, it never keeps the node's process alive: callers `ref()` its stdout
 * while an answer is due.
 */
export function spawnHelper(
  argv: readonly string[],
  gone: (why: string) => void,
): ChildProcessWithoutNullStreams {
  const [bin, ...args] = argv as [string, ...string[]];
  const child = spawn(bin, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (s: string) => {
    stderr = (stderr + s).slice(-1000);
  });
  child.on('error', (e) => gone(`did not run: ${e.message}`));
  child.on('close', (code, signal) =>
    gone(`exited (${signal ?? `status ${code}`})${stderr ? `: ${stderr.trim()}` : ''}`),
  );
  child.stdin.on('error', () => {});
  child.unref();
  for (const s of [child.stdin, child.stdout, child.stderr]) (s as unknown as Socket).unref();
  return child;
}
