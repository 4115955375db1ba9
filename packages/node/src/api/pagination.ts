import {
  decodePageToken,
  encodePageToken,
  PageTokenError,
  timestampNs,
  type PageCursor,
  type PageOrder,
} from '@aenv/protocol';
import { ApiError } from './errors.js';

/** Something listed newest first: `createdAt` descending, then `id` ascending (docs/differences.md). */
export interface Pageable {
  id: string;
  createdAt: string;
}

export interface Page<T> {
  items: T[];
  /** Cursor of the last returned item, only when more items follow. */
  nextToken?: string;
}

/** The cursor in `token`; a malformed token is the client's 400. */
export function decodeCursor(token: string): PageCursor {
  try {
    return decodePageToken(token);
  } catch (e) {
    if (e instanceof PageTokenError) throw new ApiError(400, e.message);
    throw e;
  }
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

function after(item: Pageable, c: PageCursor, order: PageOrder): boolean {
  const t = timestampNs(item.createdAt);
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
    const ta = timestampNs(a.createdAt);
    const tb = timestampNs(b.createdAt);
    if (ta !== tb) return ta > tb ? sign : -sign;
    return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  });
  const rest = nextToken ? sorted.filter((i) => after(i, decodeCursor(nextToken), order)) : sorted;
  if (limit === undefined || rest.length <= limit) return { items: rest };
  const items = rest.slice(0, limit);
  return { items, nextToken: encodePageToken(items[items.length - 1]!, order) };
}
