import { constants } from 'node:fs';

const { S_IFMT, S_IFDIR, S_IFLNK, S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK } = constants;

/**
 * Go's os.FileMode.String() for a unix st_mode, which is what E2B's envd reports as `permissions`:
 * type letters in Go's order "dLDpSugct" (L = symlink, D = device, c = char device, u/g/t =
 * setuid/setgid/sticky) followed by rwxrwxrwx, or "-" when there is no letter.
 */
export function goFileModeString(mode: number): string {
  const type = mode & S_IFMT;
  const flags: [boolean, string][] = [
    [type === S_IFDIR, 'd'],
    [type === S_IFLNK, 'L'],
    [type === S_IFBLK || type === S_IFCHR, 'D'],
    [type === S_IFIFO, 'p'],
    [type === S_IFSOCK, 'S'],
    [(mode & 0o4000) !== 0, 'u'],
    [(mode & 0o2000) !== 0, 'g'],
    [type === S_IFCHR, 'c'],
    [(mode & 0o1000) !== 0, 't'],
  ];
  const letters = flags
    .filter(([on]) => on)
    .map(([, l]) => l)
    .join('');
  const rwx = 'rwxrwxrwx';
  let perms = '';
  for (let i = 0; i < 9; i++) perms += mode & (1 << (8 - i)) ? rwx[i] : '-';
  return (letters || '-') + perms;
}
