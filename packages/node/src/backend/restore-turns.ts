// Memory restores take turns (`[limits].max_concurrent_restores`): each is CPU-bound (CRIU reading and mapping
// a checkpoint), so a burst run all at once finishes no sooner in total while every restore of it ends near the
// end; in turns, the first sandboxes are usable at once. The wait is the request's `restore-wait` phase.
import { performance } from 'node:perf_hooks';
import pLimit from 'p-limit';
import { notePhase } from '../util/phases.js';

/** Runs `restore` when a turn is free, in the order of the calls (it runs in the caller's async context). */
export type RestoreTurns = <T>(restore: () => Promise<T>) => Promise<T>;

export function restoreTurns(atOnce: number): RestoreTurns {
  const limit = pLimit(atOnce);
  return (restore) => {
    const queuedAt = performance.now();
    return limit(() => {
      notePhase('restore-wait', performance.now() - queuedAt);
      return restore();
    });
  };
}
