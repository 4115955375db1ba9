import { posix } from 'node:path';
import type { SandboxUser } from '../users/user-db.js';

export class PathError extends Error {}

/**
 * Resolves a client path the way E2B's envd does: "" is the default workdir (else home), "~" and "~/x"
 * expand to the user's home, relative paths are relative to the home, and the result is cleaned
 * lexically ("a/../b" → "b"). Confinement is not done here: envd runs in the sandbox's mount namespace,
 * so the kernel keeps every path inside the sandbox.
 */
export function resolveUserPath(path: string, user: SandboxUser, defaultWorkdir?: string): string {
  if (path.includes('\0')) throw new PathError('path contains a NUL byte');
  let p = path;
  if (p === '') p = defaultWorkdir ?? user.home;
  if (p.startsWith('~')) {
    if (p.length > 1 && p[1] !== '/')
      throw new PathError(`cannot expand user-specific home dir in '${path}'`);
    p = posix.join(user.home, p.slice(1));
  }
  return posix.resolve(user.home, p);
}
