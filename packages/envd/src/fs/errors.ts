import { constants } from 'node:os';
import { Code, ConnectError } from '@connectrpc/connect';
import { PathError } from './paths.js';

const CODES: Record<string, Code> = {
  ENOENT: Code.NotFound,
  EACCES: Code.PermissionDenied,
  EPERM: Code.PermissionDenied,
  EROFS: Code.PermissionDenied,
  EEXIST: Code.AlreadyExists,
  ENOTDIR: Code.InvalidArgument,
  EISDIR: Code.InvalidArgument,
  EINVAL: Code.InvalidArgument,
  ENAMETOOLONG: Code.InvalidArgument,
  ELOOP: Code.InvalidArgument,
  ENOTEMPTY: Code.FailedPrecondition,
  EBUSY: Code.FailedPrecondition,
  EXDEV: Code.FailedPrecondition,
  ENOSPC: Code.ResourceExhausted,
  EDQUOT: Code.ResourceExhausted,
  EMFILE: Code.ResourceExhausted,
  ENFILE: Code.ResourceExhausted,
};

// libuv has no name for some errnos (EDQUOT: a sandbox past its disk limit) and reports
// "Unknown system error -122"; the kernel's number still says what it was.
const ERRNO_NAMES = new Map(Object.entries(constants.errno).map(([name, n]) => [-n, name]));

export const DISK_LIMIT_REACHED = 'disk quota exceeded: the sandbox reached its disk size limit';

export function errnoCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { code, errno } = err as NodeJS.ErrnoException;
  if (typeof code === 'string' && code.startsWith('Unknown system error') && typeof errno === 'number')
    return ERRNO_NAMES.get(errno) ?? code;
  return code ?? undefined;
}

/** Maps an fs error to a Connect error; `what` says which path/operation failed. */
export function fsConnectError(err: unknown, what: string): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof PathError) return new ConnectError(err.message, Code.InvalidArgument);
  const code = errnoCode(err);
  const reason =
    code === 'ENOENT' ? 'no such file or directory' : (code ?? (err as Error)?.message ?? String(err));
  if (code === 'ENOENT') return new ConnectError(`file not found: ${what}: ${reason}`, Code.NotFound);
  if (code === 'EACCES' || code === 'EPERM')
    return new ConnectError(`permission denied: ${what}`, Code.PermissionDenied);
  if (code === 'EDQUOT') return new ConnectError(`${what}: ${DISK_LIMIT_REACHED}`, Code.ResourceExhausted);
  return new ConnectError(
    `${what}: ${(err as Error)?.message ?? reason}`,
    (code ? CODES[code] : undefined) ?? Code.Internal,
  );
}
