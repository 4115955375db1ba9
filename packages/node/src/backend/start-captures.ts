// Start captures: per image-based template, one node-local memory checkpoint (with its disk) of a sandbox booted
// fresh and warmed up, so that a create the warm pool cannot serve restores that checkpoint instead of booting
// (envd's Node start and first-use compilation are in the checkpoint). They are a cache: made in the background
// after a template's first cold create (the base template's at startup), at most `maxTemplates` of them, removed
// when the node stops and wiped at its next start (recover.ts); a restore of one that fails drops it.

/** One made capture: what a restore of it needs. */
export interface StartCapture<S> {
  /** The container the checkpoint was taken of (its envd holds that id's /init key). */
  seedId: string;
  /** The backend state of the checkpointed sandbox. */
  state: S;
  /** Holds `memory/` (the checkpoint) and `disk/` (its disk). */
  dir: string;
}

export interface StartCapturesOptions<Spec, S> {
  maxTemplates: number;
  /** Boots, warms up and checkpoints a sandbox of `spec`; removes the sandbox again. */
  make(spec: Spec): Promise<StartCapture<S>>;
  /** Removes a capture's files. */
  discard(capture: StartCapture<S>): Promise<void>;
  onError(key: string, err: unknown): void;
}

interface Entry<S> {
  capture?: StartCapture<S>;
  making?: Promise<void>;
  /** Restores reading it now: it is discarded only once they are done. */
  users: number;
  dropped: boolean;
}

export class StartCaptures<Spec, S> {
  private readonly entries = new Map<string, Entry<S>>();
  /** Keys whose capture could not be made: not tried again while the node runs (a cold create boots). */
  private readonly failed = new Set<string>();
  private closed = false;

  constructor(private readonly o: StartCapturesOptions<Spec, S>) {}

  /** Asks for a capture of `spec` under `key`, made in the background unless it is there, coming or failed. */
  want(key: string, spec: Spec): void {
    if (this.closed || this.failed.has(key) || this.entries.has(key)) return;
    if (this.entries.size >= this.o.maxTemplates) return;
    const entry: Entry<S> = { users: 0, dropped: false };
    this.entries.set(key, entry);
    entry.making = this.o.make(spec).then(
      (capture) => {
        entry.making = undefined;
        entry.capture = capture; // (made after close() began: close() discards it, having waited for this)
      },
      (err: unknown) => {
        entry.making = undefined;
        this.entries.delete(key);
        this.failed.add(key);
        this.o.onError(key, err);
      },
    );
  }

  /**
   * Runs `restore` with the capture under `key` if one is made (undefined otherwise); the capture is kept until
   * it returns. A restore that reports `usable: false` (its memory did not come back) drops the capture: cold
   * creates of the template boot from then on. A restore that throws keeps it (the cause may be anything).
   */
  async use<T>(
    key: string,
    restore: (capture: StartCapture<S>) => Promise<{ result: T; usable: boolean }>,
  ): Promise<T | undefined> {
    const entry = this.entries.get(key);
    if (!entry?.capture || entry.dropped) return undefined;
    entry.users++;
    try {
      const { result, usable } = await restore(entry.capture);
      if (!usable) this.drop(key, entry);
      return result;
    } finally {
      entry.users--;
      if (entry.dropped && entry.users === 0) void this.discard(key, entry);
    }
  }

  /** Keys with a made capture. */
  readyKeys(): string[] {
    return [...this.entries].filter(([, e]) => e.capture && !e.dropped).map(([k]) => k);
  }

  /** Waits for captures being made, then removes every capture (restores still running keep theirs until done). */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.entries.values()].map((e) => e.making));
    await Promise.all(
      [...this.entries].map(([key, e]) => {
        e.dropped = true;
        return e.users === 0 ? this.discard(key, e) : undefined;
      }),
    );
  }

  private drop(key: string, entry: Entry<S>): void {
    entry.dropped = true;
    this.failed.add(key);
  }

  private async discard(key: string, entry: Entry<S>): Promise<void> {
    const capture = entry.capture;
    if (this.entries.get(key) === entry) this.entries.delete(key);
    entry.capture = undefined;
    if (!capture) return;
    await this.o.discard(capture).catch((err: unknown) => this.o.onError(key, err));
  }
}
