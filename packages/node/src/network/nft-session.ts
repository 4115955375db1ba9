// The node's nftables writes through one long-lived libnftables process (native/aenv-nft.c) instead of one
// `nft -f -` process per transaction, forked from the node's large process on every warm-pool hand-out and
// every slot change. When the helper cannot be built (no libnftables headers) the writes spawn `nft` as before.
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import type { Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from '../util/log.js';
import { spawnHelper } from '../util/helper-process.js';
import { buildNativeHelper } from '../util/native-helper.js';
import { runNft, type NftRunner } from './nft-writer.js';

// packages/node/native, from src/ or dist/network.
const SOURCE = join(dirname(fileURLToPath(import.meta.url)), '../../native/aenv-nft.c');

/** nft refused a script (the transaction was not applied); the message carries nft's own error text. */
export class NftRefused extends Error {
  constructor(readonly nftMessage: string) {
    const detail = nftMessage.trim().split('\n').slice(-5).join('; ');
    super(`nft refused the transaction: ${detail}`);
    this.name = 'NftRefused';
  }
}

interface Pending {
  resolve: () => void;
  reject: (e: Error) => void;
}

/** One running helper: scripts in, answers out, in order. */
export class NftSession {
  private child: ChildProcessWithoutNullStreams | null = null;
  private pending: Pending[] = [];
  private received: Buffer = Buffer.alloc(0);

  /** `argv`: the helper and its arguments (tests run it in a network namespace of its own). */
  constructor(private readonly argv: readonly string[]) {}

  /** Applies `script` as one transaction; rejects with {@link NftRefused} when nft refuses it. */
  run(script: string): Promise<void> {
    const child = this.child ?? this.start();
    (child.stdout as Socket).ref(); // kept alive while an answer is due, not while idle
    const body = Buffer.from(script);
    const head = Buffer.alloc(4);
    head.writeUInt32BE(body.length);
    return new Promise<void>((resolve, reject) => {
      this.pending.push({ resolve, reject });
      child.stdin.write(Buffer.concat([head, body]));
    });
  }

  /** Ends the helper once it has answered what it was asked (a later `run` starts another). */
  close(): void {
    this.child?.stdin.end();
    this.child = null;
  }

  private start(): ChildProcessWithoutNullStreams {
    const mine: Pending[] = [];
    const child = spawnHelper(this.argv, (why) => {
      if (this.child === child) this.child = null;
      for (const p of mine.splice(0)) p.reject(new Error(`the nftables helper ${why}`));
    });
    this.child = child;
    this.received = Buffer.alloc(0);
    this.pending = mine;
    child.stdout.on('data', (chunk: Buffer) => {
      this.received = this.received.length ? Buffer.concat([this.received, chunk]) : chunk;
      while (this.received.length >= 5) {
        const length = this.received.readUInt32BE(1);
        if (this.received.length < 5 + length) break;
        const refused = this.received[0] !== 0x30; // '0'
        const text = this.received.subarray(5, 5 + length).toString();
        this.received = this.received.subarray(5 + length);
        const p = mine.shift();
        if (!p) continue;
        if (refused) p.reject(new NftRefused(text));
        else p.resolve();
      }
      if (mine.length === 0) (child.stdout as Socket).unref();
    });
    return child;
  }
}

/**
 * Compiles the helper into `dir` unless this source version is there already; returns its path. `gcc`: the
 * compiler (tests give one that does not exist).
 */
export async function buildNftHelper(dir: string, gcc = 'gcc'): Promise<string> {
  try {
    return await buildNativeHelper(SOURCE, dir, 'aenv-nft', gcc, ['-lnftables']);
  } catch (e) {
    throw new Error(`cannot build the nftables helper with ${gcc}: ${(e as Error).message}`);
  }
}

/**
 * The runner the node's nft writer uses: the helper, built in `dir` with `gcc` at the first write; `nft -f -`
 * processes when it cannot be built (logged once). A helper that dies is started again at the next write; the write it
 * was applying fails (the writer retries a failed batch change by change).
 */
export function nftSessionRunner(
  dir: string,
  log: Pick<Logger, 'warn'>,
  gcc = 'gcc',
): { runner: NftRunner; close(): void } {
  let session: NftSession | undefined;
  let ready: Promise<NftSession | undefined> | undefined;
  const open = async (): Promise<NftSession | undefined> => {
    try {
      return (session = new NftSession([await buildNftHelper(dir, gcc)]));
    } catch (err) {
      log.warn({ err }, 'nftables writes spawn nft per transaction: the libnftables helper is not available');
      return undefined;
    }
  };
  return {
    runner: async (script) => {
      const s = await (ready ??= open());
      await (s ? s.run(script) : runNft(script));
    },
    close: () => session?.close(),
  };
}
