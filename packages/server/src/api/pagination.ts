import { ApiError } from './errors.js';

/** Something listed newest first: `createdAt` descending, then `id` ascending (reference §2.6). */
export interface Pageable {
  id: string;
  createdAt: string;
}

export interface Page<T> {
  items: T[];
  /** Cursor of the last returned item, only when more items follow. */
  nextToken?: string;
}

interface Cursor {
  timeNs: bigint;
  id: string;
}

/** `desc` (default): newest first, then id ascending. `asc`: oldest first, then id ascending. */
export type PageOrder = 'asc' | 'desc';

function toNs(iso: string): bigint {
  const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/.exec(iso);
  if (!m) throw new Error(`invalid timestamp ${iso}`);
  const seconds = Date.parse(`${m[1]}${m[3]}`);
  if (Number.isNaN(seconds)) throw new Error(`invalid timestamp ${iso}`);
  const frac = (m[2] ?? '').padEnd(9, '0');
  return BigInt(seconds) * 1_000_000n + BigInt(frac);
}

function formatNs(ns: bigint): string {
  const ms = ns / 1_000_000n;
  const frac = (ns % 1_000_000_000n).toString().padStart(9, '0');
  return new Date(Number(ms)).toISOString().replace(/\.\d{3}Z$/, `.${frac}Z`);
}

/**
 * URL-safe base64 *with* padding of "<RFC3339 with nanoseconds>__<id>", as the reference emits it; ascending
 * pages add "__asc" as E2B's tokens do.
 */
export function encodeCursor(item: Pageable, order: PageOrder = 'desc'): string {
  const text = Buffer.from(`${formatNs(toNs(item.createdAt))}__${item.id}${order === 'asc' ? '__asc' : ''}`);
  return text.toString('base64url') + '='.repeat((3 - (text.length % 3)) % 3);
}

function decodeCursor(token: string): Cursor {
  let text: string;
  try {
    text = Buffer.from(token.replace(/=+$/, ''), 'base64url').toString('utf8');
    if (!/^[A-Za-z0-9_=-]+$/.test(token)) throw new Error('illegal base64 data');
  } catch (e) {
    throw new ApiError(400, `invalid next token: error decoding cursor: ${(e as Error).message}`);
  }
  const sep = text.indexOf('__');
  if (sep < 0) throw new ApiError(400, 'invalid next token: invalid cursor format');
  const time = text.slice(0, sep);
  const id = text.slice(sep + 2).replace(/__asc$/, '');
  let timeNs: bigint;
  try {
    timeNs = toNs(time);
  } catch (e) {
    throw new ApiError(
      400,
      `invalid next token: invalid timestamp format in cursor: ${(e as Error).message}`,
    );
  }
  if (!id) throw new ApiError(400, 'invalid next token: invalid cursor value: empty id');
  return { timeNs, id };
}

/** Parses `limit` (1..100, omitted = no limit). */
export function parseLimit(raw: unknown): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  const n = typeof raw === 'string' && /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isInteger(n) || n < 1 || n > 100) {
    throw new ApiError(400, `invalid limit "${String(raw)}": must be an integer between 1 and 100`);
  }
  return n;
}

function after(item: Pageable, c: Cursor, order: PageOrder): boolean {
  const t = toNs(item.createdAt);
  if (t !== c.timeNs) return order === 'desc' ? t < c.timeNs : t > c.timeNs;
  return item.id > c.id;
}

/** Sorts by `order` (newest first by default) and returns the page after `nextToken`. */
export function paginate<T extends Pageable>(
  all: readonly T[],
  limit: number | undefined,
  nextToken?: string,
  order: PageOrder = 'desc',
): Page<T> {
  const sign = order === 'desc' ? -1 : 1;
  const sorted = [...all].sort((a, b) => {
    const ta = toNs(a.createdAt);
    const tb = toNs(b.createdAt);
    if (ta !== tb) return ta > tb ? sign : -sign;
    return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  });
  const rest = nextToken ? sorted.filter((i) => after(i, decodeCursor(nextToken), order)) : sorted;
  if (limit === undefined || rest.length <= limit) return { items: rest };
  const items = rest.slice(0, limit);
  return { items, nextToken: encodeCursor(items[items.length - 1]!, order) };
}
