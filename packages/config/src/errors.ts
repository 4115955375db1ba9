/** Where a configuration value came from. */
export type ValueSource =
  | { kind: 'default' }
  | { kind: 'file'; path: string }
  | { kind: 'env'; name: string }
  | { kind: 'flag'; name: string };

export interface ConfigIssue {
  /** Dotted key path, e.g. "image.cache.gc.low_watermark_ratio". */
  readonly key: string;
  /** The offending value; absent when the problem is a missing value. */
  readonly value?: unknown;
  readonly hasValue: boolean;
  /** What the value must satisfy, e.g. "must be <= high_watermark_ratio (0.95)". */
  readonly rule: string;
  readonly source?: ValueSource;
}

/** Invalid configuration. The message names each key, its value and the rule it breaks, one per line. */
export class ConfigError extends Error {
  readonly issues: readonly ConfigIssue[];

  constructor(issues: readonly ConfigIssue[]) {
    super(issues.map(formatIssue).join('\n'));
    this.name = 'ConfigError';
    this.issues = issues;
  }
}

export function issue(key: string, value: unknown, rule: string, source?: ValueSource): ConfigIssue {
  return { key, value, hasValue: true, rule, source };
}

export function missing(key: string, rule: string): ConfigIssue {
  return { key, hasValue: false, rule };
}

export function formatIssue(i: ConfigIssue): string {
  const head = i.hasValue ? `${i.key} = ${formatValue(i.value)}` : `${i.key} is not set`;
  return `${head}: ${i.rule}${describeSource(i.source)}`;
}

/** " (from env X)" / " (from flag --x)"; nothing for the config file and defaults, which are the expected places. */
export function describeSource(source?: ValueSource): string {
  if (source?.kind === 'env') return ` (from env ${source.name})`;
  if (source?.kind === 'flag') return ` (from flag ${source.name})`;
  return '';
}

export function formatValue(v: unknown): string {
  if (v === undefined) return 'undefined';
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') return String(v);
  if (typeof v === 'string') return JSON.stringify(v);
  if (v instanceof Date) return v.toISOString();
  let text: string;
  try {
    text = JSON.stringify(v) ?? String(v);
  } catch {
    text = String(v);
  }
  if (typeof v === 'object' && v !== null && !Array.isArray(v) && text.startsWith('{'))
    text = `table ${text}`;
  return text.length > 120 ? `${text.slice(0, 117)}...` : text;
}
