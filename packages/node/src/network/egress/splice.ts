// Kernel splicing of the egress proxy's passthrough connections (native/aenv-splice.c): once a connection has
// moved enough bytes to be a bulk transfer, its two sockets are handed to a helper process that copies them
// with splice(2), socket → pipe → socket, instead of Node's stream pipes copying every byte through user space.
// Short connections never pay for the helper's spawn; when it cannot be built, is at its cap or fails before
// it starts copying, the connection stays in Node (docs/networking.md, "Kernel splice").
import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildNativeHelper } from '../../util/native-helper.js';

// packages/node/native, from src/ or dist/network/egress.
const SOURCE = join(dirname(fileURLToPath(import.meta.url)), '../../../native/aenv-splice.c');

/** Helpers running at once, node-wide (one process per spliced connection); beyond it connections stay in Node. */
export const MAX_SPLICE_HELPERS = 256;

/** Bytes a connection moves (both directions) through Node before it is handed to a helper. */
export const SPLICE_AFTER_BYTES = 256 * 1024;

/**
 * Compiles the helper into `dir` unless this source version is there already; returns its path. `gcc`: the
 * compiler (tests give one that does not exist).
 */
export async function buildSpliceHelper(dir: string, gcc = 'gcc'): Promise<string> {
  try {
    return await buildNativeHelper(SOURCE, dir, 'aenv-splice', gcc);
  } catch (e) {
    throw new Error(`cannot build the splice helper with ${gcc}: ${(e as Error).message}`);
  }
}

/** A connection a helper copies. */
export interface Spliced {
  /** Ends the copy now (both sockets closed, as a cut connection's). */
  kill(): void;
}

export interface SplicerStats {
  /** Helpers copying now. */
  running: number;
  /** Connections handed to a helper since start. */
  handedOff: number;
  /** Hand-offs that fell back to Node's pipes (the helper failed before copying). */
  fellBack: number;
}

/** Whether the stream state lets the sockets move to a helper: open both ways, nothing ended yet. */
function movable(s: Socket): boolean {
  const fd = (s as unknown as { _handle?: { fd?: number } })._handle?.fd;
  return (
    !s.destroyed && !s.connecting && !s.readableEnded && !s.writableEnded && typeof fd === 'number' && fd >= 0
  );
}

/** Everything `s` has read but not yet delivered (it is paused and unpiped). */
function takeBuffered(s: Socket): Buffer {
  const chunks: Buffer[] = [];
  for (let c = s.read() as Buffer | null; c !== null; c = s.read() as Buffer | null) chunks.push(c);
  return Buffer.concat(chunks);
}

/** Resolves when `data` and everything queued before it on `s` is in the kernel; false if `s` failed first. */
function flush(s: Socket, data: Buffer): Promise<boolean> {
  return new Promise((resolve) => {
    if (s.destroyed) return resolve(false);
    s.write(data, (err) => resolve(!err && !s.destroyed));
  });
}

export class Splicer {
  private readonly children = new Set<ChildProcess>();
  private handedOff = 0;
  private fellBack = 0;
  private stopped = false;

  /** `helper`: the built helper's path; null: every connection stays in Node. */
  constructor(
    private readonly helper: string | null,
    private readonly max = MAX_SPLICE_HELPERS,
    private readonly onError: (message: string) => void = () => undefined,
  ) {}

  get enabled(): boolean {
    return this.helper !== null && !this.stopped;
  }

  get stats(): SplicerStats {
    return { running: this.children.size, handedOff: this.handedOff, fellBack: this.fellBack };
  }

  /**
   * Moves the copying of `a` ⇄ `b` (piped to each other now, both open) to a helper. Returns null, changing
   * nothing, when it cannot (no helper, at the cap, a side already ended). Otherwise the pipes are taken down,
   * what Node had read is written on, the helper copies from there; `done` runs when it has finished (both
   * directions ended, or an error, or kill) or, with `fellBack`, when it failed before copying and the pipes
   * are back. Node's own copies of the sockets stay open (not read) until `done`: the caller's close handling
   * then runs when it destroys them.
   */
  handOff(a: Socket, b: Socket, done: (fellBack: boolean) => void): Spliced | null {
    if (!this.enabled || this.children.size >= this.max || !movable(a) || !movable(b)) return null;
    // From here to spawn() all is synchronous: no read lands between taking the buffers and the helper's
    // spawn stopping Node's reads (child_process stops reading a socket it hands to a child).
    a.unpipe(b);
    b.unpipe(a);
    a.pause();
    b.pause();
    const fromA = takeBuffered(a);
    const fromB = takeBuffered(b);
    let child: ChildProcess;
    try {
      // No argument and an empty environment: the helper is given the two sockets and nothing else.
      child = spawn(this.helper as string, [], { stdio: ['pipe', 'ignore', 'pipe', a, b], env: {} });
    } catch (e) {
      this.onError(`splice helper did not start: ${(e as Error).message}`);
      this.fellBack++;
      this.repipe(a, b, fromA, fromB);
      return null;
    }
    this.children.add(child);
    this.handedOff++;
    // flushing: Node writes out what it had; copying: the helper has the go byte; over: done ran.
    let state: 'flushing' | 'copying' | 'over' = 'flushing';
    let stderr = '';
    child.stderr?.setEncoding('utf8').on('data', (s: string) => {
      if (stderr.length < 4096) stderr += s;
    });
    child.stdin?.on('error', () => undefined);
    const close = () => {
      child.kill('SIGKILL');
      a.destroy();
      b.destroy();
    };
    const fallBack = (why: string) => {
      // The helper never read the go byte: the sockets are untouched, Node's pipes take over again.
      this.onError(why);
      this.fellBack++;
      this.children.delete(child);
      state = 'over';
      this.repipe(a, b, fromA, fromB);
      done(true);
    };
    child.on('error', (err) => {
      if (state === 'flushing') fallBack(`splice helper did not start: ${err.message}`);
    });
    child.on('exit', (code, signal) => {
      if (state === 'flushing' && !a.destroyed && !b.destroyed)
        return fallBack(`splice helper exited before copying (${signal ?? code}): ${stderr.trim()}`);
      if (state === 'over') return;
      if (code === 2) this.onError(`splice helper failed: ${stderr.trim()}`);
      state = 'over';
      this.children.delete(child);
      a.destroy();
      b.destroy();
      done(false);
    });
    // The bytes Node already has go out first, then the helper may start.
    void Promise.all([flush(b, fromA), flush(a, fromB)]).then(([okB, okA]) => {
      if (state !== 'flushing') return;
      if (!okA || !okB || this.stopped) return close();
      state = 'copying';
      child.stdin?.end(Buffer.from([1]));
    });
    return { kill: close };
  }

  /** Kills every helper (their connections close). */
  stop(): void {
    this.stopped = true;
    for (const c of this.children) c.kill('SIGKILL');
  }

  private repipe(a: Socket, b: Socket, fromA: Buffer, fromB: Buffer): void {
    if (a.destroyed || b.destroyed) return;
    if (fromA.length > 0) b.write(fromA);
    if (fromB.length > 0) a.write(fromB);
    // An EOF Node saw while the pipes were down is passed on here (the pipe would have ended the other side).
    for (const [src, dst] of [
      [a, b],
      [b, a],
    ] as const) {
      if (src.readableEnded) dst.end();
      else src.pipe(dst);
    }
  }
}
