// The host uid/gid span aenv uses (docs/security.md, "uid isolation"): block 0 owns the cached image layers
// (no sandbox runs as it), blocks 1..count are the sandboxes' own ranges, one per sandbox.
import { readFile } from 'node:fs/promises';
import type { IdRange } from '../../driver.js';
import { RuntimeError } from '../../driver.js';

export interface IdLayout {
  /** `[runtime].uid_map_host_start`: first id of the span, and of the image range. */
  start: number;
  /** `[runtime].uid_map_size`: ids per range. */
  size: number;
  /** `[runtime].uid_ranges`: number of sandbox ranges after the image range. */
  count: number;
}

const MAX_ID = 2 ** 32 - 1;

export function assertLayout(l: IdLayout): void {
  const ok = (n: number, min: number) => Number.isSafeInteger(n) && n >= min;
  if (!ok(l.start, 1) || !ok(l.size, 1) || !ok(l.count, 1)) {
    throw new RuntimeError(
      'InvalidSpec',
      `uid layout start=${l.start} size=${l.size} ranges=${l.count}: start and size must be integers >= 1, ranges >= 1`,
    );
  }
  if (spanEnd(l) > MAX_ID) {
    throw new RuntimeError(
      'InvalidSpec',
      `uid span ${l.start}..${spanEnd(l) - 1} (uid_map_host_start + uid_map_size × (1 + uid_ranges)) must stay below ${MAX_ID}`,
    );
  }
}

/** One past the last id of the span. */
export function spanEnd(l: IdLayout): number {
  return l.start + l.size * (l.count + 1);
}

/** The range the image layers are owned by (what every sandbox shared before per-sandbox ranges). */
export function imageRange(l: IdLayout): IdRange {
  return { hostStart: l.start, size: l.size };
}

/** Sandbox range number `block` (1..count). */
export function rangeOfBlock(l: IdLayout, block: number): IdRange {
  return { hostStart: l.start + block * l.size, size: l.size };
}

/** Which block of the span `id` lies in (0 = image range), or undefined outside the span. */
export function blockOf(l: IdLayout, id: number): number | undefined {
  if (id < l.start || id >= spanEnd(l)) return undefined;
  return Math.floor((id - l.start) / l.size);
}

/** Refuses a range that is not exactly one of this layout's sandbox ranges (fail closed). */
export function assertSandboxRange(l: IdLayout, r: IdRange | undefined, what: string): IdRange {
  const block = r ? blockOf(l, r.hostStart) : undefined;
  if (
    !r ||
    r.size !== l.size ||
    block === undefined ||
    block === 0 ||
    rangeOfBlock(l, block).hostStart !== r.hostStart
  ) {
    throw new RuntimeError(
      'InvalidSpec',
      `${what}: uid range ${r ? `${r.hostStart}+${r.size}` : '(none)'} is not one of this node's sandbox ranges (${l.start + l.size}+${l.size} × ${l.count})`,
    );
  }
  return r;
}

export interface SubidEntry {
  file: string;
  line: number;
  text: string;
  start: number;
  count: number;
}

/** Parses /etc/subuid-style text (`name:start:count` per line; `#` comments and blank lines ignored). */
export function parseSubidFile(file: string, text: string): SubidEntry[] {
  const out: SubidEntry[] = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) return;
    const parts = line.split(':');
    const start = Number(parts[1]);
    const count = Number(parts[2]);
    if (parts.length !== 3 || !Number.isSafeInteger(start) || !Number.isSafeInteger(count)) return;
    out.push({ file, line: i + 1, text: line, start, count });
  });
  return out;
}

export const SUBID_FILES = ['/etc/subuid', '/etc/subgid'];

/**
 * Refuses to run when the span overlaps an entry of /etc/subuid or /etc/subgid: those ids belong to a host
 * user's own containers (rootless podman, buildah), and sharing them would let that user's processes own
 * sandbox files and the other way round. A missing file has no entries.
 */
export async function assertNoSubidCollision(l: IdLayout, files = SUBID_FILES): Promise<void> {
  const end = spanEnd(l);
  for (const file of files) {
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw new RuntimeError('HostSetup', `cannot read ${file}: ${(e as Error).message}`);
    }
    for (const entry of parseSubidFile(file, text)) {
      if (entry.start < end && entry.start + entry.count > l.start) {
        throw new RuntimeError(
          'HostSetup',
          `the sandbox uid/gid span ${l.start}..${end - 1} (runtime.uid_map_host_start = ${l.start}, uid_map_size = ${l.size}, uid_ranges = ${l.count}) overlaps ${file} line ${entry.line} "${entry.text}" (ids ${entry.start}..${entry.start + entry.count - 1}); move runtime.uid_map_host_start past it or change that entry`,
        );
      }
    }
  }
}
