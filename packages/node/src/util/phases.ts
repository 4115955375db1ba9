// Where the time of one request goes: code anywhere below the API wraps a step in `phase(name, fn)`, and the
// API answers lifecycle requests with the phases as a `Server-Timing` header (docs/benchmarks.md#phases). The
// recorder travels with the request's async context, so nothing passes it around, and without one (a
// background job, a test) `phase` only runs `fn`.
import { AsyncLocalStorage } from 'node:async_hooks';
import { performance } from 'node:perf_hooks';

export interface PhaseTotal {
  name: string;
  /** Wall time summed over every run of the phase in the request (parallel runs add up). */
  ms: number;
  runs: number;
}

export class PhaseRecorder {
  private readonly totals = new Map<string, PhaseTotal>();
  readonly startedAt = performance.now();

  add(name: string, ms: number): void {
    const t = this.totals.get(name);
    if (t) {
      t.ms += ms;
      t.runs += 1;
    } else this.totals.set(name, { name, ms, runs: 1 });
  }

  /** In the order each phase first ended. */
  list(): PhaseTotal[] {
    return [...this.totals.values()];
  }
}

const current = new AsyncLocalStorage<PhaseRecorder>();

/** Runs `fn` with a fresh recorder that every `phase` inside it (at any depth) reports to. */
export function recordPhases<T>(recorder: PhaseRecorder, fn: () => T): T {
  return current.run(recorder, fn);
}

/** Runs `fn` as the named phase of the current request, if one is being recorded. */
export async function phase<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const recorder = current.getStore();
  if (!recorder) return fn();
  const t0 = performance.now();
  try {
    return await fn();
  } finally {
    recorder.add(name, performance.now() - t0);
  }
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** `Server-Timing` (W3C): each phase as `name;dur=ms`, repeated phases with `desc="N runs"`, then `total`. */
export function serverTimingHeader(recorder: PhaseRecorder, totalMs: number): string {
  const parts = recorder.list().map((p) => {
    if (!TOKEN.test(p.name)) throw new Error(`phase name ${JSON.stringify(p.name)} is not an HTTP token`);
    return `${p.name};dur=${p.ms.toFixed(1)}${p.runs > 1 ? `;desc="${p.runs} runs"` : ''}`;
  });
  parts.push(`total;dur=${totalMs.toFixed(1)}`);
  return parts.join(', ');
}

/** Reads a `Server-Timing` header back (for clients: the bench's trace mode, tests). */
export function parseServerTiming(header: string): { name: string; ms: number; runs: number }[] {
  return header
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const [name = '', ...params] = entry.split(';').map((s) => s.trim());
      let ms = 0;
      let runs = 1;
      for (const p of params) {
        const [k, v = ''] = p.split('=');
        if (k === 'dur') ms = Number(v);
        if (k === 'desc') runs = Number(/^"?(\d+) runs"?$/.exec(v)?.[1] ?? 1);
      }
      return { name, ms, runs };
    });
}

/** Runs `fn` outside any request's recording (background work a request only started). */
export function detached<T>(fn: () => T): T {
  return current.exit(fn);
}

/** Adds a phase measured elsewhere (e.g. a wait whose start and end are in different places). */
export function notePhase(name: string, ms: number): void {
  current.getStore()?.add(name, ms);
}
