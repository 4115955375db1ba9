// Build logs: kept in memory while a build runs and appended to `<dir>/<buildId>.log` (one JSON entry per line),
// so the status endpoint still answers after the build ended or the server restarted.
import { createWriteStream, existsSync, mkdirSync, type WriteStream } from 'node:fs';
import { appendFile, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';

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
const MAX_ENTRIES = 50_000;
const RECENT_CACHE = 16;

function rank(l: LogLevel): number {
  return LOG_LEVELS.indexOf(l);
}

export function parseLogLevel(raw: unknown): LogLevel | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw === 'string' && (LOG_LEVELS as readonly string[]).includes(raw)) return raw as LogLevel;
  throw Object.assign(
    new Error(`invalid level ${JSON.stringify(raw)}: must be one of ${LOG_LEVELS.join(', ')}`),
    {
      status: 400,
    },
  );
}

export function selectEntries(all: readonly BuildLogEntry[], q: LogQuery): BuildLogEntry[] {
  const min = q.level ? rank(q.level) : 0;
  const filtered = min > 0 ? all.filter((e) => rank(e.level) >= min) : all;
  const start = Math.max(0, q.offset ?? 0);
  return filtered.slice(start, q.limit === undefined ? undefined : start + q.limit);
}

/** The log of one running build. */
export class BuildLog {
  private readonly list: BuildLogEntry[] = [];
  private readonly out: WriteStream;
  private dropped = 0;
  private closed = false;

  constructor(readonly path: string) {
    this.out = createWriteStream(path, { flags: 'w', mode: 0o600 });
    this.out.on('error', () => {
      // A full disk must not fail the build; the in-memory copy is still served.
    });
  }

  get entries(): readonly BuildLogEntry[] {
    return this.list;
  }

  add(level: LogLevel, message: string, step?: string): void {
    if (this.closed) return;
    if (this.list.length >= MAX_ENTRIES) {
      this.dropped++;
      return;
    }
    const text = message.length > MAX_LINE ? `${message.slice(0, MAX_LINE)}… (truncated)` : message;
    const entry: BuildLogEntry = {
      timestamp: new Date().toISOString(),
      level,
      message: text,
      ...(step ? { step } : {}),
    };
    this.list.push(entry);
    this.out.write(`${JSON.stringify(entry)}\n`);
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
        for (const l of lines) this.add(level, prefix + l, step);
      },
      flush: () => {
        if (partial) this.add(level, prefix + partial, step);
        partial = '';
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    if (this.dropped > 0) {
      const note = `${this.dropped} further log entries were dropped (limit ${MAX_ENTRIES})`;
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

  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  pathOf(buildId: string): string {
    return join(this.dir, `${buildId}.log`);
  }

  /** Starts (or restarts) the log of a build. */
  open(buildId: string): BuildLog {
    this.recent.delete(buildId);
    const log = new BuildLog(this.pathOf(buildId));
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
