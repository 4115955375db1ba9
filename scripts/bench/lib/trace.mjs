// `--trace`: the phases of every lifecycle answer the run gets (the node's `Server-Timing` header,
// docs/benchmarks.md#phases), collected from every undici request of the process — the e2b SDK's and fetch —
// and summarised per node and route as the median of each phase.
import diagnostics from 'node:diagnostics_channel';
import { URL } from 'node:url';
import { parseServerTiming } from './product.mjs';
import { summarize } from './stats.mjs';

/** @type {Map<string, string>} origin → node name */
const origins = new Map();
/** @type {Map<string, { name: string, ms: number }[][]>} "node METHOD /route" → samples */
const samples = new Map();
let installed = false;
/** Added to the keys of the answers that arrive while it is set (a suite's part, e.g. "burst"). */
let label = '';

/** Groups the answers from now on under `name` (empty: no group); suites run their parts one after another. */
export function traceLabel(name) {
  label = name;
}

/** Names a node's origin (`http://127.0.0.1:port`) in the summary. */
export function nameOrigin(url, name) {
  origins.set(new URL(url).origin, name);
}

/** The route of a path with its ids replaced, e.g. /sandboxes/{id}/pause. */
export function routeOf(path) {
  const p = path.split('?')[0] ?? '';
  return p.replace(/^(\/(?:v\d\/)?(?:sandboxes|templates|snapshots))\/[^/]+/, '$1/{id}');
}

/** Starts collecting from every HTTP request undici makes in this process (Node's fetch and the e2b SDK's own). */
export function startTrace() {
  if (installed) return;
  installed = true;
  diagnostics.subscribe('undici:request:headers', (message) => {
    const { request, response } =
      /** @type {{ request: { origin: string | URL, method: string, path: string }, response: { headers: Buffer[] } }} */ (
        message
      );
    const raw = response.headers;
    let header;
    for (let i = 0; i + 1 < raw.length; i += 2)
      if (String(raw[i]).toLowerCase() === 'server-timing') header = String(raw[i + 1]);
    if (!header) return;
    const origin = new URL(String(request.origin)).origin;
    const key = `${origins.get(origin) ?? origin} ${request.method.toUpperCase()} ${routeOf(request.path)}${label ? ` [${label}]` : ''}`;
    const list = samples.get(key) ?? [];
    list.push(parseServerTiming(header));
    samples.set(key, list);
  });
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
