import { writeSync } from 'node:fs';

/**
 * Writes a log line to fd 2, dropping it when it cannot be written. stderr is a file on the sandbox's disk:
 * once the sandbox filled its disk (EDQUOT), a stream write would emit an unhandled 'error' and end envd.
 */
export function writeStderr(line: string): void {
  try {
    writeSync(2, line);
  } catch {
    // Losing a log line is better than losing envd.
  }
}

/** envd's logger: one JSON object per line on stderr (aenv-init passes it to the sandbox's console). */
export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

const LEVELS = { debug: 10, info: 20, warn: 30, error: 40 } as const;
export type LogLevel = keyof typeof LEVELS;

export function createLogger(level: LogLevel = 'info', write: (line: string) => void = writeStderr): Logger {
  const min = LEVELS[level];
  const log = (lvl: LogLevel) => (msg: string, fields?: Record<string, unknown>) => {
    if (LEVELS[lvl] < min) return;
    const entry: Record<string, unknown> = { t: new Date().toISOString(), level: lvl, msg, ...fields };
    for (const [k, v] of Object.entries(entry)) if (v instanceof Error) entry[k] = v.message;
    write(`${JSON.stringify(entry)}\n`);
  };
  return { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') };
}

export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };
