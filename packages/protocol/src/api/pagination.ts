// Paginated lists (`GET /v2/sandboxes`, `GET /v2/templates`, `GET /snapshots`): `limit` and `nextToken` in the
// query, the next page's token in the `x-next-token` answer header, as E2B does it.

/** Answer header naming the token of the next page; absent on the last page. */
export const NEXT_TOKEN_HEADER = 'x-next-token';

/** `desc` (default): newest first, then id ascending. `asc`: oldest first, then id ascending. */
export type PageOrder = 'asc' | 'desc';

/** Where a page ends: the creation time (in ns) and id of its last item. */
export interface PageCursor {
  timeNs: bigint;
  id: string;
}

/** A `nextToken` that is not one this format produces; the message is the 400 answer's. */
export class PageTokenError extends Error {}

/** An RFC3339 timestamp (up to nanoseconds) as nanoseconds since the epoch. */
export function timestampNs(iso: string): bigint {
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
 * The token of the page after `item`: URL-safe base64 *with* padding of "<RFC3339 with nanoseconds>__<id>", as
 * the reference emits it; ascending pages add "__asc" as E2B's tokens do.
 */
export function encodePageToken(item: { id: string; createdAt: string }, order: PageOrder = 'desc'): string {
  const text = Buffer.from(
    `${formatNs(timestampNs(item.createdAt))}__${item.id}${order === 'asc' ? '__asc' : ''}`,
  );
  return text.toString('base64url') + '='.repeat((3 - (text.length % 3)) % 3);
}

/** Reads a `nextToken`; throws PageTokenError naming what is wrong with it. */
export function decodePageToken(token: string): PageCursor {
  let text: string;
  try {
    text = Buffer.from(token.replace(/=+$/, ''), 'base64url').toString('utf8');
    if (!/^[A-Za-z0-9_=-]+$/.test(token)) throw new Error('illegal base64 data');
  } catch (e) {
    throw new PageTokenError(`invalid next token: error decoding cursor: ${(e as Error).message}`);
  }
  const sep = text.indexOf('__');
  if (sep < 0) throw new PageTokenError('invalid next token: invalid cursor format');
  const time = text.slice(0, sep);
  const id = text.slice(sep + 2).replace(/__asc$/, '');
  let timeNs: bigint;
  try {
    timeNs = timestampNs(time);
  } catch (e) {
    throw new PageTokenError(
      `invalid next token: invalid timestamp format in cursor: ${(e as Error).message}`,
    );
  }
  if (!id) throw new PageTokenError('invalid next token: invalid cursor value: empty id');
  return { timeNs, id };
}
