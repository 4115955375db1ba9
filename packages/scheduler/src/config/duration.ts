// Durations in the scheduler's JSON config are strings in Go's time.ParseDuration syntax ("30s", "1m30s",
// "250ms"), as the reference's config is: a bare number is refused because its unit would be a guess.
const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  μs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/** Milliseconds of a Go duration string; throws with the reason when it is not one. */
export function parseGoDuration(text: string): number {
  const s = text.trim();
  if (s === '0' || s === '+0' || s === '-0') return 0;
  const m = /^([-+]?)((?:(?:\d+\.?\d*|\.\d+)[a-zµμ]+)+)$/.exec(s);
  if (!m) throw new Error(`invalid duration ${JSON.stringify(text)}`);
  let total = 0;
  for (const part of m[2]!.matchAll(/(\d+\.?\d*|\.\d+)([a-zµμ]+)/g)) {
    const unit = UNIT_MS[part[2]!];
    if (unit === undefined)
      throw new Error(`unknown unit ${JSON.stringify(part[2])} in duration ${JSON.stringify(text)}`);
    total += Number(part[1]) * unit;
  }
  return m[1] === '-' ? -total : total;
}

/** "30s", "1m30s", "250ms": the shortest Go-style rendering of whole milliseconds, for logs and docs. */
export function formatDuration(ms: number): string {
  if (ms % 3_600_000 === 0 && ms > 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0 && ms > 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}
