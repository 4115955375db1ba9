// Group commit for layer durability: every finished unpack must be on disk before its metadata row is written,
// but one syncfs covers every layer written before it started. Callers arriving while a sync runs share the
// next one (the running one may have started before their data was written).

export class SyncCoalescer {
  private running: Promise<void> | undefined;
  private next: Promise<void> | undefined;

  constructor(private readonly doSync: () => Promise<void>) {}

  sync(): Promise<void> {
    if (!this.running) return this.start();
    if (!this.next) {
      this.next = this.running
        .catch(() => {})
        .then(() => {
          this.next = undefined;
          return this.start();
        });
    }
    return this.next;
  }

  private start(): Promise<void> {
    const p = this.doSync().finally(() => {
      if (this.running === p) this.running = undefined;
    });
    this.running = p;
    return p;
  }
}
