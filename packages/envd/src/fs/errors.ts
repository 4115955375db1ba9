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

export function errnoCode(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null
    ? ((err as NodeJS.ErrnoException).code ?? undefined)
    : undefined;
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
  return new ConnectError(
    `${what}: ${(err as Error)?.message ?? reason}`,
    (code ? CODES[code] : undefined) ?? Code.Internal,
  );
}
