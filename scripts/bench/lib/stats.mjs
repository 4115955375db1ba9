// Sample summaries for the benchmark tables: min / median / p95 (nearest rank), plus mean and max.

/** @typedef {{ n: number, min: number, median: number, p95: number, mean: number, max: number }} Summary */

/** Nearest-rank quantile of sorted samples (q in 0..1). */
function quantile(sorted, q) {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

/** @returns {Summary | null} null when there are no samples. */
export function summarize(samples) {
  const s = samples.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return null;
  const mean = s.reduce((a, b) => a + b, 0) / s.length;
  return {
    n: s.length,
    min: s[0],
    median: quantile(s, 0.5),
    p95: quantile(s, 0.95),
    mean,
    max: s[s.length - 1],
  };
}

/** aenv median / raw median, or null when either is missing. */
export function ratio(aenv, raw) {
  if (!aenv || !raw || raw.median <= 0) return null;
  return aenv.median / raw.median;
}

/** Fixed-precision number for tables: one decimal, or two below 10. */
export function fmt(x) {
  if (x === null || x === undefined || !Number.isFinite(x)) return '-';
  return Math.abs(x) < 10 ? x.toFixed(2) : x.toFixed(1);
}
