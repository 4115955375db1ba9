// `--trace`: the phases of every lifecycle answer the run gets (the node's `Server-Timing` header,
// docs/benchmarks.md#phases), collected from every fetch of the process — the e2b SDK's and the bench's own —
// and summarised per node and route as the median of each phase.
import { URL } from 'node:url';
import { summarize } from './stats.mjs';

/** @type {Map<string, string>} origin → node name */
const origins = new Map();
/** @type {Map<string, { name: string, ms: number }[][]>} "node METHOD /route" → samples */
const samples = new Map();
let installed = false;

/** Names a node's origin (`http://127.0.0.1:port`) in the summary. */
export function nameOrigin(url, name) {
  origins.set(new URL(url).origin, name);
}

/** The route of a path with its ids replaced, e.g. /sandboxes/{id}/pause. */
export function routeOf(path) {
  const p = path.split('?')[0] ?? '';
  return p.replace(/^(\/(?:v\d\/)?(?:sandboxes|templates|snapshots))\/[^/]+/, '$1/{id}');
}

/** @param {string} header */
export function parseServerTiming(header) {
  return header
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const [name = '', ...params] = entry.split(';').map((s) => s.trim());
      const dur = params.find((p) => p.startsWith('dur='));
      return { name, ms: dur ? Number(dur.slice(4)) : 0 };
    });
}

/** Starts collecting: wraps `globalThis.fetch` (once). */
export function startTrace() {
  if (installed) return;
  installed = true;
  const original = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    const res = await original(input, init);
    const header = res.headers.get('server-timing');
    if (header) {
      // `input` is a URL string, a URL, or a Request (which has its own url and method).
      const request = typeof input === 'object' && 'method' in input ? input : undefined;
      const url = new URL(request ? request.url : String(input));
      const method = (init?.method ?? request?.method ?? 'GET').toUpperCase();
      const key = `${origins.get(url.origin) ?? url.host} ${method} ${routeOf(url.pathname)}`;
      const list = samples.get(key) ?? [];
      list.push(parseServerTiming(header));
      samples.set(key, list);
    }
    return res;
  };
}

/** Per node and route: the number of answers and the median of each phase (in the order phases appear). */
export function traceSummary() {
  return [...samples].map(([key, runs]) => {
    /** @type {Map<string, number[]>} */
    const byPhase = new Map();
    for (const run of runs) for (const p of run) byPhase.set(p.name, [...(byPhase.get(p.name) ?? []), p.ms]);
    return {
      key,
      n: runs.length,
      phases: [...byPhase].map(([name, ms]) => ({
        name,
        medianMs: summarize(ms)?.median ?? 0,
        n: ms.length,
      })),
    };
  });
}

/** The summary as text: one line per node and route. */
export function traceTable() {
  return traceSummary()
    .map(
      (s) =>
        `${s.key} (n=${s.n}): ` +
        s.phases.map((p) => `${p.name} ${p.medianMs.toFixed(1)}${p.n < s.n ? ` (${p.n}×)` : ''}`).join(' · '),
    )
    .join('\n');
}
