// What a volume name and a mount path may be (docs/volumes.md). Names never reach a host path (a volume's
// directory is named by its id), but they appear in logs and errors: kept to a plain, bounded alphabet.
import { posix } from 'node:path';
import { DomainError, ErrorKind } from '@aenv/protocol';

const invalid = (message: string) => new DomainError(ErrorKind.InvalidArgument, message);

export const VOLUME_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;

export function assertVolumeName(name: unknown): string {
  if (typeof name !== 'string' || !VOLUME_NAME_RE.test(name)) {
    throw invalid(
      `volume name ${JSON.stringify(typeof name === 'string' ? name.slice(0, 80) : name)} is invalid: 1-63 characters [A-Za-z0-9_-], starting with a letter or digit`,
    );
  }
  return name;
}

/**
 * Paths a volume may not be mounted at or above: the kernel's, the tools' (envd and init live in /agentenv and
 * /run/agentenv) and the system's own (a volume over /etc or /usr would hide what envd needs to run commands).
 */
const RESERVED = [
  '/proc',
  '/sys',
  '/dev',
  '/agentenv',
  '/run/agentenv',
  '/etc',
  '/usr',
  '/bin',
  '/sbin',
  '/lib',
  '/lib64',
];
const MAX_PATH = 1024;

/** A mount path inside the sandbox: absolute, normalised, not `/`, not over or under a reserved path. */
export function assertMountPath(path: unknown, what = 'volumeMounts path'): string {
  const bad = (why: string): never => {
    throw invalid(`${what} ${JSON.stringify(typeof path === 'string' ? path.slice(0, 80) : path)} ${why}`);
  };
  if (typeof path !== 'string' || path.length === 0) return bad('must be a non-empty string');
  if (path.length > MAX_PATH) return bad(`is longer than ${MAX_PATH} characters`);
  if (!path.startsWith('/')) return bad('must be absolute');
  if (/[\0\n\r\t,:\\]/.test(path)) return bad('must not contain NUL, control characters, ",", ":" or "\\"');
  if (path.split('/').some((s) => s === '..' || s === '.'))
    return bad('must not contain "." or ".." segments');
  const normal = posix.normalize(path).replace(/\/+$/, '');
  if (normal === '' || normal === '/') return bad('must not be the root directory');
  for (const r of RESERVED) {
    if (normal === r || normal.startsWith(`${r}/`) || r.startsWith(`${normal}/`))
      return bad(`must not be at, inside or above ${r} (the system's and envd's own paths)`);
  }
  return normal;
}
