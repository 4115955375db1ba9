// The release of a paused sandbox's resident container (its frozen processes, then its slot) runs in the
// background, outside the sandbox's lock (docs/benchmarks.md, "Where the time goes"): a resume never waits for it
// (it restores into a container id no release holds, and a release yet to start waits for the resume), a kill or
// hand-over waits for it, shutdown waits for all.
// Nothing of it needs to be durable: the pause artifacts are, and a restart removes every container and slot no
// running sandbox keeps (recover.ts).
import type { Logger } from '../util/log.js';
import { detached } from '../util/phases.js';

/**
 * How long a release waits before it starts: a resume that follows the pause at once (the commonest case of a
 * resume soon after a pause) then restores alone, not beside the old container's teardown on the same cores.
 */
const YIELD_MS = 300;

/**
 * Fault injection for tests: `AENV_FAULT_RELEASE_DELAY_MS` holds every release back this long instead, which
 * makes "a resume right after the pause" deterministic. Unset in production.
 */
function startDelayMs(): number {
  const ms = Number(process.env.AENV_FAULT_RELEASE_DELAY_MS ?? 0);
  return Number.isFinite(ms) && ms > 0 ? ms : YIELD_MS;
}

export class ResidentReleases {
  /** Releases in flight: sandbox id → container id → its release. */
  private readonly inFlight = new Map<string, Map<string, Promise<void>>>();
  /** Per sandbox, what makes its releases that wait to start, start now (a kill, a hand-over, shutdown). */
  private readonly hurries = new Map<string, Set<() => void>>();
  /** The resume of a sandbox in progress: its releases start only after it. */
  private readonly resumes = new Map<string, Promise<unknown>>();
  /** Per sandbox, how many callers wait in `settled` (its releases start at once meanwhile). */
  private readonly waiters = new Map<string, number>();
  /** Shutdown: releases start at once. */
  private closing = false;

  constructor(private readonly log: Logger) {}

  /** Runs a resume of the sandbox; releases of its old containers wait until it is done. */
  async resuming<T>(sandboxId: string, fn: () => Promise<T>): Promise<T> {
    const run = fn();
    this.resumes.set(sandboxId, run);
    try {
      return await run;
    } finally {
      if (this.resumes.get(sandboxId) === run) this.resumes.delete(sandboxId);
    }
  }

  /** Starts `release` of `containerId` (a container of `sandboxId`) in the background. */
  start(sandboxId: string, containerId: string, release: () => Promise<void>): void {
    const mine = this.inFlight.get(sandboxId) ?? new Map<string, Promise<void>>();
    this.inFlight.set(sandboxId, mine);
    const previous = mine.get(containerId) ?? Promise.resolve();
    const work = detached(async () => {
      await previous;
      await this.startDelay(sandboxId);
      for (let r = this.resumes.get(sandboxId); r; r = this.resumes.get(sandboxId)) await r.catch(() => {});
      try {
        await release();
        this.log.info({ sandboxId, containerId }, 'released the memory of a paused sandbox');
      } catch (err) {
        this.log.warn({ err, sandboxId, containerId }, 'could not release the memory of a paused sandbox');
      }
    });
    mine.set(containerId, work);
    void work.finally(() => {
      if (mine.get(containerId) !== work) return;
      mine.delete(containerId);
      if (mine.size === 0 && this.inFlight.get(sandboxId) === mine) this.inFlight.delete(sandboxId);
    });
  }

  /** Whether a release of this container is still in flight. */
  busy(sandboxId: string, containerId: string): boolean {
    return this.inFlight.get(sandboxId)?.has(containerId) ?? false;
  }

  /**
   * The container id a new instance of the sandbox runs under: its own id, or (while a release still holds that)
   * the first `<id>-rN` none holds.
   */
  freeContainerId(sandboxId: string): string {
    if (!this.busy(sandboxId, sandboxId)) return sandboxId;
    for (let n = 1; ; n++) {
      const id = `${sandboxId}-r${n}`;
      if (!this.busy(sandboxId, id)) return id;
    }
  }

  /** The wait before a release starts, cut short (or skipped) while someone waits for the sandbox's releases. */
  private startDelay(sandboxId: string): Promise<void> {
    if (this.closing || (this.waiters.get(sandboxId) ?? 0) > 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const set = this.hurries.get(sandboxId) ?? new Set<() => void>();
      this.hurries.set(sandboxId, set);
      const done = () => {
        clearTimeout(timer);
        set.delete(done);
        if (set.size === 0 && this.hurries.get(sandboxId) === set) this.hurries.delete(sandboxId);
        resolve();
      };
      const timer = setTimeout(done, startDelayMs());
      set.add(done);
    });
  }

  /** Resolves when no release of the sandbox is in flight; those still waiting to start, start now. */
  async settled(sandboxId: string): Promise<void> {
    this.waiters.set(sandboxId, (this.waiters.get(sandboxId) ?? 0) + 1);
    for (const hurry of [...(this.hurries.get(sandboxId) ?? [])]) hurry();
    try {
      for (let mine = this.inFlight.get(sandboxId); mine; mine = this.inFlight.get(sandboxId)) {
        await Promise.all([...mine.values()]);
      }
    } finally {
      const left = (this.waiters.get(sandboxId) ?? 1) - 1;
      if (left > 0) this.waiters.set(sandboxId, left);
      else this.waiters.delete(sandboxId);
    }
  }

  /** Resolves when no release is in flight (shutdown, tests). */
  async idle(): Promise<void> {
    this.closing = true;
    for (const set of [...this.hurries.values()]) for (const hurry of [...set]) hurry();
    while (this.inFlight.size > 0) {
      await Promise.all([...this.inFlight.values()].flatMap((m) => [...m.values()]));
    }
  }
}
