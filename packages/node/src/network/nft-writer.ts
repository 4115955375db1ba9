// The one writer of the aenv nftables table. Changes queue up while `nft` runs and go out together
// as one `nft -f -` transaction; a failed batch is retried change by change so only the bad one fails.

import { run } from '../util/exec.js';

export type NftRunner = (script: string) => Promise<void>;

export const runNft: NftRunner = async (script) => {
  await run('nft', ['-f', '-'], { input: script, timeoutMs: 30_000 });
};

type Entry =
  | { kind: 'script'; script: string; resolve: () => void; reject: (e: unknown) => void }
  | {
      kind: 'exclusive';
      fn: () => Promise<unknown>;
      resolve: (v: unknown) => void;
      reject: (e: unknown) => void;
    };

export class NftWriter {
  private readonly queue: Entry[] = [];
  private running = false;
  /** Number of `nft` invocations so far (for metrics and tests). */
  invocations = 0;

  constructor(private readonly runner: NftRunner = runNft) {}

  /** Applies a script atomically (possibly in one transaction with other queued scripts). */
  apply(script: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({
        kind: 'script',
        script: script.endsWith('\n') ? script : `${script}\n`,
        resolve,
        reject,
      });
      this.pump();
    });
  }

  /** Runs `fn` while no other change is in flight (for list-then-modify sequences). */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ kind: 'exclusive', fn, resolve: resolve as (v: unknown) => void, reject });
      this.pump();
    });
  }

  /** Runs a script right now; only for use inside `exclusive`. */
  async applyNow(script: string): Promise<void> {
    this.invocations++;
    await this.runner(script);
  }

  /** Resolves once everything queued so far has been applied. */
  async idle(): Promise<void> {
    await this.exclusive(async () => undefined);
  }

  private pump(): void {
    if (this.running) return;
    this.running = true;
    void this.drain().finally(() => {
      this.running = false;
      if (this.queue.length > 0) this.pump();
    });
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const head = this.queue[0] as Entry;
      if (head.kind === 'exclusive') {
        this.queue.shift();
        try {
          head.resolve(await head.fn());
        } catch (e) {
          head.reject(e);
        }
        continue;
      }
      const batch: Extract<Entry, { kind: 'script' }>[] = [];
      while (this.queue.length > 0 && (this.queue[0] as Entry).kind === 'script') {
        batch.push(this.queue.shift() as Extract<Entry, { kind: 'script' }>);
      }
      await this.applyBatch(batch);
    }
  }

  private async applyBatch(batch: Extract<Entry, { kind: 'script' }>[]): Promise<void> {
    try {
      await this.applyNow(batch.map((e) => e.script).join(''));
      for (const e of batch) e.resolve();
      return;
    } catch (e) {
      if (batch.length === 1) {
        (batch[0] as Extract<Entry, { kind: 'script' }>).reject(e);
        return;
      }
    }
    for (const entry of batch) {
      try {
        await this.applyNow(entry.script);
        entry.resolve();
      } catch (e) {
        entry.reject(e);
      }
    }
  }
}
