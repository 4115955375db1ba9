// Filtering and shaping of sandbox logs for `GET /sandboxes/{id}/logs` (v1) and `GET /v2/sandboxes/{id}/logs`.
import { DomainError, ErrorKind } from '@aenv/protocol';
import type { SandboxLogLevel, SandboxLogLine } from './sandbox-log-store.js';

export const MAX_LOG_LIMIT = 1000;
export const MAX_SEARCH_LENGTH = 256;

const RANK: Record<SandboxLogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** A query the caller got wrong. */
export class LogQueryError extends DomainError {
  constructor(message: string) {
    super(ErrorKind.InvalidArgument, message);
    this.name = 'LogQueryError';
  }
}

/** A non-negative integer query value, or undefined when absent. */
export function parseQueryInt(raw: unknown, name: string, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  const n = typeof raw === 'string' && /^\d{1,16}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n) || n > max) {
    throw new LogQueryError(
      `invalid ${name} ${JSON.stringify(String(raw)).slice(0, 80)}: must be an integer from 0 to ${max}`,
    );
  }
  return n;
}

function parseEnum<T extends string>(raw: unknown, name: string, values: readonly T[]): T | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw === 'string' && (values as readonly string[]).includes(raw)) return raw as T;
  throw new LogQueryError(
    `invalid ${name} ${JSON.stringify(String(raw)).slice(0, 80)}: must be one of ${values.join(', ')}`,
  );
}

export interface LogQueryV1 {
  start?: number;
  limit: number;
}

export interface LogQueryV2 {
  cursor?: number;
  direction: 'forward' | 'backward';
  level?: SandboxLogLevel;
  search?: string;
  limit: number;
}

export function parseLogQueryV1(q: Record<string, unknown>): LogQueryV1 {
  return {
    start: parseQueryInt(q.start, 'start'),
    limit: parseQueryInt(q.limit, 'limit', MAX_LOG_LIMIT) ?? MAX_LOG_LIMIT,
  };
}

export function parseLogQueryV2(q: Record<string, unknown>): LogQueryV2 {
  if (q.search !== undefined && typeof q.search !== 'string')
    throw new LogQueryError('invalid search: give it once');
  if (typeof q.search === 'string' && q.search.length > MAX_SEARCH_LENGTH)
    throw new LogQueryError(`invalid search: at most ${MAX_SEARCH_LENGTH} characters`);
  return {
    cursor: parseQueryInt(q.cursor, 'cursor'),
    direction: parseEnum(q.direction, 'direction', ['forward', 'backward'] as const) ?? 'forward',
    level: parseEnum(q.level, 'level', ['debug', 'info', 'warn', 'error'] as const),
    ...(typeof q.search === 'string' && q.search ? { search: q.search } : {}),
    limit: parseQueryInt(q.limit, 'limit', MAX_LOG_LIMIT) ?? MAX_LOG_LIMIT,
  };
}

/** Both sources in time order (stable: lines of one source keep their order at equal times). */
export function mergeLines(...sources: SandboxLogLine[][]): SandboxLogLine[] {
  return sources.flat().sort((a, b) => a.timestampMs - b.timestampMs);
}

const iso = (ms: number) => new Date(ms).toISOString();

/** The line as one JSON object (v1 `logs[].line`; E2B's CLI parses it and reads `level` and `logger`). */
function lineJson(l: SandboxLogLine): string {
  return JSON.stringify({ ...l.fields, level: l.level, logger: l.logger, message: l.message });
}

function entry(l: SandboxLogLine) {
  return {
    timestamp: iso(l.timestampMs),
    level: l.level,
    message: l.message,
    fields: { ...l.fields, logger: l.logger },
  };
}

/** v1: lines at or after `start` (ms), oldest first, at most `limit`. */
export function shapeV1(lines: SandboxLogLine[], q: LogQueryV1) {
  const picked = lines.filter((l) => q.start === undefined || l.timestampMs >= q.start).slice(0, q.limit);
  return {
    logs: picked.map((l) => ({ timestamp: iso(l.timestampMs), line: lineJson(l) })),
    logEntries: picked.map(entry),
  };
}

/**
 * v2: `forward` = lines at or after `cursor` (ms, default the beginning), oldest first; `backward` = lines at or
 * before `cursor` (default now), newest first. `level` is the minimum level; `search` a case-sensitive substring
 * of the message.
 */
export function shapeV2(lines: SandboxLogLine[], q: LogQueryV2) {
  const min = q.level ? RANK[q.level] : 0;
  const filtered = lines.filter(
    (l) =>
      RANK[l.level] >= min &&
      (q.search === undefined || l.message.includes(q.search)) &&
      (q.cursor === undefined ||
        (q.direction === 'forward' ? l.timestampMs >= q.cursor : l.timestampMs <= q.cursor)),
  );
  const ordered = q.direction === 'forward' ? filtered : filtered.reverse();
  return { logs: ordered.slice(0, q.limit).map(entry) };
}
