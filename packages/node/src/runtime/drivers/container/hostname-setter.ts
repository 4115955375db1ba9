// Sets the kernel hostname of a running sandbox through one long-lived helper process (`aenv-idmap hostnames`,
// native/aenv-idmap.c) instead of one `nsenter hostname` process per call: a pre-started sandbox is renamed on
// every warm-pool hand-out, and a burst of hand-outs spawned a process each from the node's large process.
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import type { Socket } from 'node:net';
import { spawnHelper } from '../../../util/helper-process.js';
import { RuntimeError } from '../../driver.js';

interface Pending {
  what: string;
  resolve: () => void;
  reject: (e: Error) => void;
}

export class HostnameSetter {
  private child: ChildProcessWithoutNullStreams | null = null;
  /** Requests written to the current helper, answered in order. */
  private pending: Pending[] = [];
  private partial = '';

  /** `argv`: the helper and its arguments (`[helper, 'hostnames']`). */
  constructor(private readonly argv: readonly string[]) {}

  /** Gives the UTS namespace `pid` is in the hostname `name` (already checked to be an RFC 1123 label). */
  set(pid: number, name: string): Promise<void> {
    if (!Number.isInteger(pid) || pid <= 0 || !/^[A-Za-z0-9-]{1,63}$/.test(name)) {
      return Promise.reject(new RuntimeError('InvalidSpec', `cannot set hostname "${name}" of pid ${pid}`));
    }
    const child = this.child ?? this.start();
    // Kept alive while a request waits for its answer, not while idle.
    (child.stdout as Socket).ref();
    return new Promise<void>((resolve, reject) => {
      this.pending.push({ what: `hostname ${name} (pid ${pid})`, resolve, reject });
      child.stdin.write(`${pid} ${name}\n`);
    });
  }

  /** Stops the helper once it has answered what it was asked (a later `set` starts another). */
  close(): void {
    this.child?.stdin.end();
    this.child = null;
    this.pending = [];
  }

  private start(): ChildProcessWithoutNullStreams {
    const mine: Pending[] = [];
    const child = spawnHelper(this.argv, (why) => {
      if (this.child === child) {
        this.child = null;
        this.pending = [];
      }
      for (const p of mine.splice(0)) {
        p.reject(new RuntimeError('Internal', `setting ${p.what}: the hostname helper ${why}`));
      }
    });
    this.child = child;
    this.partial = '';
    this.pending = mine;
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      const lines = (this.partial + chunk).split('\n');
      this.partial = lines.pop() ?? '';
      for (const line of lines) {
        const p = mine.shift();
        if (!p) continue;
        if (line === 'ok') p.resolve();
        else p.reject(new RuntimeError('Internal', `setting ${p.what}: ${line.replace(/^err /, '')}`));
      }
      if (mine.length === 0) (child.stdout as Socket).unref();
    });
    return child;
  }
}
