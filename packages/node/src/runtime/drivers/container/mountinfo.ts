import { readFile } from 'node:fs/promises';

export interface MountEntry {
  mountPoint: string;
  fsType: string;
  source: string;
  superOptions: string[];
  /** Per-mount options (rw/ro, nosuid, nodev, noexec, noatime, ...). */
  mountOptions: string[];
  /** major:minor of the mounted device. */
  device: string;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
function unescapeOctal(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

export function parseMountInfo(text: string): MountEntry[] {
  const out: MountEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const fields = line.split(' ');
    const sep = fields.indexOf('-', 6);
    if (sep < 0 || fields.length < sep + 4) continue;
    out.push({
      device: fields[2] ?? '',
      mountPoint: unescapeOctal(fields[4] ?? ''),
      fsType: fields[sep + 1] ?? '',
      source: unescapeOctal(fields[sep + 2] ?? ''),
      superOptions: (fields[sep + 3] ?? '').split(','),
      mountOptions: (fields[5] ?? '').split(','),
    });
  }
  return out;
}

export async function readMounts(): Promise<MountEntry[]> {
  return parseMountInfo(await readFile('/proc/self/mountinfo', 'utf8'));
}

/** Mounts at `dir` or below it, deepest first (the order to unmount them in). */
export function mountsUnder(mounts: MountEntry[], dir: string): MountEntry[] {
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  return mounts
    .filter((m) => m.mountPoint === dir || m.mountPoint.startsWith(prefix))
    .sort((a, b) => b.mountPoint.length - a.mountPoint.length);
}
