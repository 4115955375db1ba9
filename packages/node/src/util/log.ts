import { pino, type Logger, type DestinationStream } from 'pino';
import pinoPretty from 'pino-pretty';
import { currentRequestId } from './request-context.js';

export type { Logger };
export type LogFormat = 'compact' | 'pretty' | 'json';

/** Every line logged while a request is served names it, wherever in the server the line is written. */
function withRequestId(): { requestId?: string } {
  const requestId = currentRequestId();
  return requestId ? { requestId } : {};
}

/** The server's root logger. `compact` = one line per event, `pretty` = multi-line, `json` = raw pino JSON. */
export function createLogger(format: LogFormat, level = 'info', destination?: DestinationStream): Logger {
  if (format === 'json') return pino({ level, base: undefined, mixin: withRequestId }, destination);
  const stream = pinoPretty({
    sync: true,
    colorize: format === 'pretty' && process.stdout.isTTY,
    singleLine: format === 'compact',
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname',
    destination: destination ? undefined : 1,
  });
  return pino({ level, base: undefined, mixin: withRequestId }, destination ?? stream);
}
