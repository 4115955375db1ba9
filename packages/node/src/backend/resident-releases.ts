// The release of a paused sandbox's resident container (its frozen processes, then its slot) runs in the
// background, outside the sandbox's lock (docs/benchmarks.md, "Where the time goes"): a resume never waits for it
// (it restores into a container id no release holds), a kill or hand-over waits for it, shutdown waits for all.
// Nothing of it needs to be durable: the pause artifacts are, and a restart removes every container and slot no
// running sandbox keeps (recover.ts).
import type { Logger } from '../util/log.js';
import { detached } from '../util/phases.js';

/**
 * Fault injection for tests: `AENV_FAULT_RELEASE_DELAY_MS` holds every release back this long before it starts,
 * which makes "a resume right after the pause" deterministic. Unset in production: no delay.
 */
async function faultReleaseDelay(): Promise<void> {
  const ms = Number(process.env.AENV_FAULT_RELEASE_DELAY_MS ?? 0);
  if (Number.isFinite(ms) && ms > 0) await new Promise((r) => setTimeout(r, ms));
}

export class ResidentReleases {
  /** Releases in flight: sandbox id → container id → its release. */
  private readonly inFlight = new Map<string, Map<string, Promise<void>>>();

  constructor(private readonly log: Logger) {}

  /** Starts `release` of `containerId` (a container of `sandboxId`) in the background. */
  start(sandboxId: string, containerId: string, release: () => Promise<void>): void {
    const mine = this.inFlight.get(sandboxId) ?? new Map<string, Promise<void>>();
    this.inFlight.set(sandboxId, mine);
    const previous = mine.get(containerId) ?? Promise.resolve();
    const work = detached(async () => {
      await previous;
      await faultReleaseDelay();
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

  /** Resolves when no release of the sandbox is in flight. */
  async settled(sandboxId: string): Promise<void> {
    for (let mine = this.inFlight.get(sandboxId); mine; mine = this.inFlight.get(sandboxId)) {
      await Promise.all([...mine.values()]);
    }
  }

  /** Resolves when no release is in flight (shutdown, tests). */
  async idle(): Promise<void> {
    while (this.inFlight.size > 0) {
      await Promise.all([...this.inFlight.values()].flatMap((m) => [...m.values()]));
    }
  }
}
