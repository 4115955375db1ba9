import { pino, type Logger } from 'pino';
import pinoPretty from 'pino-pretty';

export type { Logger };

/** `json` = one JSON object per line; `console` = readable lines; `auto` = console on a terminal, else JSON. */
export function createLogger(level: string, format: string): Logger {
  const f = format.toLowerCase();
  const readable = f === 'console' || (f === 'auto' && process.stdout.isTTY === true);
  const options = { level: level.toLowerCase(), base: { service: 'scheduler' } };
  if (!readable) return pino(options);
  return pino(
    options,
    pinoPretty({
      sync: true,
      colorize: process.stdout.isTTY === true,
      singleLine: true,
      translateTime: 'SYS:HH:MM:ss.l',
      ignore: 'pid,hostname,service',
    }),
  );
}
