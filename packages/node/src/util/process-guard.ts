// The `aenv server` process's last line of defence: a failure nobody awaited or caught is logged, with the id of
// the request it belongs to (the logger adds it, util/log.ts), and the server keeps serving every other sandbox
// and request. Node's default would end the process: one hostile request would take the node down
// (docs/security.md, "Hostile API callers").
import type { Logger } from './log.js';

/** Installs the handlers on `proc`; returns a function that removes them again. */
export function installProcessGuards(logger: Logger, proc: NodeJS.Process = process): () => void {
  const onRejection = (reason: unknown) => {
    logger.error({ err: reason }, 'unhandled promise rejection; the server keeps running');
  };
  const onException = (err: Error, origin: string) => {
    logger.error({ err, origin }, 'uncaught exception; the server keeps running');
  };
  proc.on('unhandledRejection', onRejection);
  proc.on('uncaughtException', onException);
  return () => {
    proc.off('unhandledRejection', onRejection);
    proc.off('uncaughtException', onException);
  };
}
