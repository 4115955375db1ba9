import { constants } from 'node:fs';
import { access } from 'node:fs/promises';

/** True when `path` exists (as any kind of file; symlinks are followed). */
export async function exists(path: string): Promise<boolean> {
  try {
    await access(path, constants.F_OK);
    return true;
  } catch {
    return false;
  }
}
