// What the client commands print: a table on a terminal, JSON (the API's own objects) when piped, or what
// `--output` says (docs/cli.md "Output").
import Table from 'cli-table3';
import { usageError } from './errors.js';

export type OutputMode = 'table' | 'json';

export function outputMode(flag: string | undefined, stdoutIsTTY: boolean): OutputMode {
  if (flag === undefined) return stdoutIsTTY ? 'table' : 'json';
  if (flag === 'table' || flag === 'json') return flag;
  throw usageError(`--output ${JSON.stringify(flag)} is not one of: table, json`);
}

export interface Column<T> {
  header: string;
  /** Objects are shown as JSON. */
  value: (row: T) => unknown;
}

const plain = { head: [] as string[], border: [] as string[] };

/** Rows under a header line, no colours (they would reach files and pipes). */
export function renderTable<T>(rows: readonly T[], columns: readonly Column<T>[]): string {
  const t = new Table({ head: columns.map((c) => c.header), style: { ...plain, compact: true } });
  for (const r of rows) t.push(columns.map((c) => cell(c.value(r))));
  return t.toString();
}

/** One object as `field | value` lines. */
export function renderRecord(obj: Record<string, unknown>): string {
  const t = new Table({ style: { ...plain } });
  for (const [k, v] of Object.entries(obj)) t.push({ [k]: cell(v) });
  return t.toString();
}

function cell(v: unknown): string {
  if (v === undefined || v === null) return '';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

export const renderJson = (v: unknown): string => JSON.stringify(v, null, 2);

/** The printer of one command run. */
export class Output {
  constructor(
    readonly mode: OutputMode,
    private readonly write: (s: string) => void = (s) => process.stdout.write(s),
  ) {}

  /** A list: the table of `columns`, or the objects themselves as a JSON array. */
  list<T>(rows: readonly T[], columns: readonly Column<T>[]): void {
    if (this.mode === 'json') this.write(renderJson(rows) + '\n');
    else this.write(rows.length ? renderTable(rows, columns) + '\n' : '(none)\n');
  }

  /** One object: field/value lines, or the object as JSON. */
  record(obj: object): void {
    if (this.mode === 'json') this.write(renderJson(obj) + '\n');
    else this.write(renderRecord(obj as Record<string, unknown>) + '\n');
  }

  /** The outcome of an action: a sentence on a terminal, `result` as JSON otherwise. */
  done(result: object, sentence: string): void {
    this.write(this.mode === 'json' ? renderJson(result) + '\n' : sentence + '\n');
  }

  /** Text printed as-is in both modes (an id, a completion script). */
  raw(text: string): void {
    this.write(text);
  }
}
