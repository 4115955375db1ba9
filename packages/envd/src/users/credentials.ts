import type { NativeApi } from '../native.js';
import type { SandboxUser } from './user-db.js';

/**
 * Runs fn with the kernel checking permissions as `user` (fsuid/fsgid/groups of this thread), so every
 * *synchronous* fs call inside fn behaves exactly as if the user made it: permission errors, file
 * ownership, setgid directories, sticky /tmp. fn must be synchronous: async fs work runs on libuv's
 * threads, which keep envd's credentials.
 */
export type AsUser = <T>(user: SandboxUser, fn: () => T) => T;

export function createAsUser(native: NativeApi | undefined, processUid = process.getuid?.() ?? 0): AsUser {
  return <T>(user: SandboxUser, fn: () => T): T => {
    // Nothing to switch: envd already is this user (root acting as root, or a non-root dev run).
    if (user.uid === processUid && (processUid === 0 || !native)) return guardSync(fn());
    if (!native) throw new Error(`cannot act as user '${user.name}': native helper not loaded`);
    return native.runAs(user.uid, user.gid, user.groups, () => guardSync(fn()));
  };
}

function guardSync<T>(value: T): T {
  if (value instanceof Promise) throw new Error('asUser callback must be synchronous');
  return value;
}
