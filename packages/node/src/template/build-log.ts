// Build logs: kept in memory while a build runs and appended to `<dir>/<buildId>.log` (one JSON entry per line),
// so the status endpoint still answers after the build ended or the server restarted.
import { createWriteStream, existsSync, mkdirSync, type WriteStream } from 'node:fs';
import { appendFile, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { DomainError, ErrorKind } from '@aenv/protocol';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export const LOG_LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error'];

export interface BuildLogEntry {
  /** RFC3339 UTC. */
  timestamp: string;
  level: LogLevel;
  message: string;
  /** `base`, `finalize` or the 1-based step index the entry belongs to. */
  step?: string;
}

export interface LogQuery {
  offset?: number;
  limit?: number;
  /** Minimum level. */
  level?: LogLevel;
}

const MAX_LINE = 8 * 1024;
const RECENT_CACHE = 16;

/** `[template_build].max_log_lines` / `max_log_mb`: what one build's log may hold (docs/templates.md#logs). */
export interface BuildLogLimits {
  maxEntries: number;
  maxBytes: number;
}

export const DEFAULT_LOG_LIMITS: BuildLogLimits = { maxEntries: 50_000, maxBytes: 8 * 1024 * 1024 };

/**
 * Entries of aenv's own (build progress, the failure) still kept once command output filled the log: a few per
 * step, so a build that printed too much still ends with its status line.
 */
const OWN_ENTRIES_RESERVE = 1000;

function sizeText(bytes: number): string {
  const mib = bytes / (1024 * 1024);
  return Number.isInteger(mib) ? `${mib} MiB` : `${bytes} bytes`;
}

function rank(l: LogLevel): number {
  return LOG_LEVELS.indexOf(l);
}

export function parseLogLevel(raw: unknown): LogLevel | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw === 'string' && (LOG_LEVELS as readonly string[]).includes(raw)) return raw as LogLevel;
  throw new DomainError(
    ErrorKind.InvalidArgument,
    `invalid level ${JSON.stringify(raw)}: must be one of ${LOG_LEVELS.join(', ')}`,
  );
}

export function selectEntries(all: readonly BuildLogEntry[], q: LogQuery): BuildLogEntry[] {
  const min = q.level ? rank(q.level) : 0;
  const filtered = min > 0 ? all.filter((e) => rank(e.level) >= min) : all;
  const start = Math.max(0, q.offset ?? 0);
  return filtered.slice(start, q.limit === undefined ? undefined : start + q.limit);
}

/**
 * The log of one running build. Command output counts against the limits; once they are reached further output
 * is dropped and one warning says so. aenv's own entries are still kept (up to a reserve).
 */
export class BuildLog {
  private readonly list: BuildLogEntry[] = [];
  private readonly out: WriteStream;
  private bytes = 0;
  private dropped = 0;
  private full = false;
  private closed = false;

  constructor(
    readonly path: string,
    private readonly limits: BuildLogLimits = DEFAULT_LOG_LIMITS,
  ) {
    this.out = createWriteStream(path, { flags: 'w', mode: 0o600 });
    this.out.on('error', () => {
      // A full disk must not fail the build; the in-memory copy is still served.
    });
  }

  get entries(): readonly BuildLogEntry[] {
    return this.list;
  }

  /** An entry of aenv's own (kept even when command output filled the log). */
  add(level: LogLevel, message: string, step?: string): void {
    if (this.list.length >= this.limits.maxEntries + OWN_ENTRIES_RESERVE) {
      this.dropped++;
      return;
    }
    this.push(level, message, step);
  }

  /** A line of command output: dropped once the log holds max_log_lines entries or max_log_mb bytes. */
  private output(level: LogLevel, message: string, step: string | undefined): void {
    if (this.closed) return;
    if (!this.full) {
      const size = Buffer.byteLength(message) + 100;
      if (this.list.length < this.limits.maxEntries && this.bytes + size <= this.limits.maxBytes) {
        this.push(level, message, step);
        return;
      }
      this.full = true;
      this.push(
        'warn',
        `build log truncated: it reached ${this.list.length >= this.limits.maxEntries ? `${this.limits.maxEntries} entries (template_build.max_log_lines)` : `${sizeText(this.limits.maxBytes)} (template_build.max_log_mb)`}; further command output is dropped`,
        step,
      );
    }
    this.dropped++;
  }

  private push(level: LogLevel, message: string, step: string | undefined): void {
    if (this.closed) return;
    const text = message.length > MAX_LINE ? `${message.slice(0, MAX_LINE)}… (truncated)` : message;
    const entry: BuildLogEntry = {
      timestamp: new Date().toISOString(),
      level,
      message: text,
      ...(step ? { step } : {}),
    };
    const line = `${JSON.stringify(entry)}\n`;
    this.bytes += Buffer.byteLength(line);
    this.list.push(entry);
    this.out.write(line);
  }

  /** Splits command output into lines; call `flush()` when the command ended. */
  lineWriter(
    level: LogLevel,
    step: string | undefined,
    prefix = '',
  ): { write(chunk: Buffer): void; flush(): void } {
    let partial = '';
    return {
      write: (chunk) => {
        const text = partial + chunk.toString('utf8');
        const lines = text.split(/\r?\n/);
        partial = lines.pop() ?? '';
        if (partial.length > MAX_LINE) {
          lines.push(partial);
          partial = '';
        }
        for (const l of lines) this.output(level, prefix + l, step);
      },
      flush: () => {
        if (partial) this.output(level, prefix + partial, step);
        partial = '';
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    if (this.dropped > 0) {
      const note = `${this.dropped} log lines were dropped (limits: ${this.limits.maxEntries} entries, ${sizeText(this.limits.maxBytes)})`;
      this.list.push({ timestamp: new Date().toISOString(), level: 'warn', message: note });
      this.out.write(`${JSON.stringify(this.list[this.list.length - 1])}\n`);
    }
    this.closed = true;
    await new Promise<void>((resolve) => this.out.end(resolve));
  }
}

/** All build logs of this node. */
export class BuildLogStore {
  private readonly active = new Map<string, BuildLog>();
  private readonly recent = new Map<string, BuildLogEntry[]>();

  constructor(
    readonly dir: string,
    private readonly limits: BuildLogLimits = DEFAULT_LOG_LIMITS,
  ) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  pathOf(buildId: string): string {
    return join(this.dir, `${buildId}.log`);
  }

  /** Starts (or restarts) the log of a build. */
  open(buildId: string): BuildLog {
    this.recent.delete(buildId);
    const log = new BuildLog(this.pathOf(buildId), this.limits);
    this.active.set(buildId, log);
    return log;
  }

  async finish(buildId: string): Promise<void> {
    const log = this.active.get(buildId);
    if (!log) return;
    await log.close();
    this.active.delete(buildId);
    this.remember(buildId, [...log.entries]);
  }

  private remember(buildId: string, entries: BuildLogEntry[]): void {
    this.recent.delete(buildId);
    this.recent.set(buildId, entries);
    while (this.recent.size > RECENT_CACHE) this.recent.delete(this.recent.keys().next().value!);
  }

  /** Entries of a running or finished build; [] when this node has none. */
  async read(buildId: string): Promise<readonly BuildLogEntry[]> {
    const live = this.active.get(buildId);
    if (live) return live.entries;
    const cached = this.recent.get(buildId);
    if (cached) return cached;
    const path = this.pathOf(buildId);
    if (!existsSync(path)) return [];
    const text = await readFile(path, 'utf8');
    const entries: BuildLogEntry[] = [];
    for (const line of text.split('\n')) {
      if (!line) continue;
      try {
        const e = JSON.parse(line) as BuildLogEntry;
        if (typeof e.message === 'string' && typeof e.timestamp === 'string' && LOG_LEVELS.includes(e.level))
          entries.push(e);
      } catch {
        // a line cut short by a crash
      }
    }
    this.remember(buildId, entries);
    return entries;
  }

  /** Appends to the stored log of a build that is not running (restart recovery). */
  async appendStored(buildId: string, entry: Omit<BuildLogEntry, 'timestamp'>): Promise<void> {
    const full: BuildLogEntry = { timestamp: new Date().toISOString(), ...entry };
    await appendFile(this.pathOf(buildId), `${JSON.stringify(full)}\n`, { mode: 0o600 });
    this.recent.delete(buildId);
  }

  async remove(buildId: string): Promise<void> {
    this.recent.delete(buildId);
    await rm(this.pathOf(buildId), { force: true });
  }
}
