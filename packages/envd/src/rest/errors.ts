import { HttpError } from '../http/respond.js';
import { DISK_LIMIT_REACHED, errnoCode } from '../fs/errors.js';
import { PathError } from '../fs/paths.js';

/** Maps an fs error of a /files request to the REST status E2B clients expect. */
export function fileHttpError(err: unknown, path: string): HttpError {
  if (err instanceof HttpError) return err;
  if (err instanceof PathError) return new HttpError(400, err.message);
  switch (errnoCode(err)) {
    case 'ENOENT':
      return new HttpError(404, `path '${path}' does not exist`);
    case 'EACCES':
    case 'EPERM':
    case 'EROFS':
      return new HttpError(403, `permission denied: '${path}'`);
    case 'ENOTDIR':
      return new HttpError(400, `a parent of '${path}' is not a directory`);
    case 'EISDIR':
      return new HttpError(400, `path '${path}' is a directory`);
    case 'ENAMETOOLONG':
    case 'ELOOP':
    case 'EINVAL':
      return new HttpError(400, `invalid path '${path}': ${(err as Error).message}`);
    case 'ENOSPC':
      return new HttpError(507, `not enough disk space available: ${(err as Error).message}`);
    case 'EDQUOT':
      return new HttpError(507, `not enough disk space available: ${DISK_LIMIT_REACHED}`);
    default:
      return new HttpError(500, `error accessing '${path}': ${(err as Error)?.message ?? String(err)}`);
  }
}
