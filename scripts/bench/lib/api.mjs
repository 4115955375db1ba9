// Calls to a node's control plane for the benchmark: timed, and able to tell "this route is not built
// yet" (404 route not found, or 501) from a real failure.
import { performance } from 'node:perf_hooks';
import { setTimeout } from 'node:timers';

/** The aenv side of an operation cannot be measured yet: its route is missing or answers 501. */
export class Unavailable extends Error {
  constructor(message) {
    super(message);
    this.name = 'Unavailable';
  }
}

export function isUnavailableAnswer(ans) {
  return ans.status === 501 || (ans.status === 404 && /^route not found/.test(ans.body?.message ?? ''));
}

/**
 * One API call, timed from request to parsed answer. `label` names the route in messages (no ids).
 * Throws Unavailable for a missing/501 route and Error for any status not in `ok`.
 */
export async function timedApi(server, method, path, body, ok, label) {
  const t0 = performance.now();
  const ans = await server.api(method, path, body);
  const ms = performance.now() - t0;
  if (isUnavailableAnswer(ans)) {
    throw new Unavailable(
      `${label} answers ${ans.status}${ans.body?.message ? `: ${ans.body.message}` : ''}`,
    );
  }
  if (!ok.includes(ans.status)) {
    const msg = typeof ans.body === 'string' ? ans.body : JSON.stringify(ans.body);
    throw new Error(`${label} answered ${ans.status}: ${msg?.slice(0, 300)}`);
  }
  return { ms, ans };
}

/** Runs `fn` over `items` with at most `limit` at a time; results in input order. */
export async function mapLimit(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
