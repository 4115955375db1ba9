// Results of a benchmark run: one row per measured operation (aenv next to its raw twin), printed as a
// table (markdown, so it pastes into docs/benchmarks.md) and written as JSON.
import { writeFile } from 'node:fs/promises';
import { fmt, ratio, summarize } from './stats.mjs';

export const NOT_AVAILABLE = 'not available yet';

/**
 * A target: `maxRatio` (aenv median / raw median), `maxMedian` or `maxMean` (absolute, in the row's unit), or
 * `minMedian` (a rate that must be reached).
 * @typedef {{ maxRatio?: number, maxMedian?: number, maxMean?: number, minMedian?: number, text: string }} Target
 */

export class Report {
  constructor() {
    /** @type {object[]} */
    this.rows = [];
    this.extra = {};
  }

  /**
   * Adds a measured row. `aenv` / `raw` are sample arrays (or Summaries); `raw` may be absent.
   * @returns the row (so a suite can refer to it later, e.g. to compare against it).
   */
  add({ suite, op, unit = 'ms', aenv, baseline = null, raw = null, target = null, note = null }) {
    const a = Array.isArray(aenv) ? summarize(aenv) : aenv;
    const r = Array.isArray(raw) ? summarize(raw) : raw;
    const row = {
      suite,
      op,
      unit,
      status: 'ok',
      aenv: a,
      baseline,
      raw: r,
      ratio: ratio(a, r),
      target,
      verdict: /** @type {'meets' | 'misses' | null} */ (null),
      note,
    };
    row.verdict = verdict(row);
    this.rows.push(row);
    return row;
  }

  /**
   * A row whose aenv side was not measured: `status` is NOT_AVAILABLE (route missing or 501) or 'failed';
   * its raw twin may still be given.
   */
  notMeasured({
    suite,
    op,
    unit = 'ms',
    status = NOT_AVAILABLE,
    reason,
    baseline = null,
    raw = null,
    target = null,
  }) {
    const r = Array.isArray(raw) ? summarize(raw) : raw;
    const row = {
      suite,
      op,
      unit,
      status,
      aenv: null,
      baseline,
      raw: r,
      ratio: null,
      target,
      verdict: null,
      note: reason,
    };
    this.rows.push(row);
    return row;
  }

  failed({ suite, op, error }) {
    const row = {
      suite,
      op,
      unit: 'ms',
      status: 'failed',
      aenv: null,
      baseline: null,
      raw: null,
      ratio: null,
      target: null,
      verdict: null,
      note: describe(error),
    };
    this.rows.push(row);
    return row;
  }

  /** Rows of a suite that failed before it could say which operations it measures. */
  suiteFailed(suite, error) {
    return this.failed({ suite, op: '(suite)', error });
  }

  table() {
    const head = [
      'operation',
      'aenv min / median / p95',
      'raw twin (same run)',
      'raw min / median / p95',
      'ratio',
      'target',
    ];
    const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
    const notes = [];
    for (const r of this.rows) {
      let op = `${r.suite}: ${r.op}`;
      if (r.note) {
        // Rows sharing a note share its number.
        let i = notes.indexOf(r.note);
        if (i < 0) i = notes.push(r.note) - 1;
        op += ` [${i + 1}]`;
      }
      const aenv = r.status === 'ok' ? triple(r.aenv, r.unit) : r.status;
      const raw = r.raw ? triple(r.raw, r.unit) : '-';
      const target = r.target ? `${r.target.text}${r.verdict ? `: ${r.verdict}` : ''}` : '-';
      lines.push(
        `| ${[op, aenv, r.baseline ?? '-', raw, r.ratio === null ? '-' : `${r.ratio.toFixed(2)}×`, target].join(' | ')} |`,
      );
    }
    return { table: lines.join('\n'), notes: notes.map((n, i) => `[${i + 1}] ${n}`).join('\n') };
  }

  async writeJson(path, meta) {
    await writeFile(path, JSON.stringify({ ...meta, rows: this.rows, extra: this.extra }, null, 2) + '\n');
  }
}

function triple(s, unit) {
  if (!s) return '-';
  return `${fmt(s.min)} / ${fmt(s.median)} / ${fmt(s.p95)} ${unit}${s.n ? ` (n=${s.n})` : ''}`;
}

function verdict(row) {
  const t = row.target;
  if (!t || !row.aenv) return null;
  if (t.maxRatio !== undefined)
    return row.ratio === null ? null : row.ratio <= t.maxRatio ? 'meets' : 'misses';
  if (t.maxMedian !== undefined) return row.aenv.median <= t.maxMedian ? 'meets' : 'misses';
  if (t.maxMean !== undefined) return row.aenv.mean <= t.maxMean ? 'meets' : 'misses';
  if (t.minMedian !== undefined) return row.aenv.median >= t.minMedian ? 'meets' : 'misses';
  return null;
}

export function describe(e) {
  if (e instanceof Error) return e.message.split('\n').slice(0, 4).join(' ');
  return String(e);
}
