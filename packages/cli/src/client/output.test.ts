import { describe, expect, it } from 'vitest';
import { Output, outputMode, renderTable } from './output.js';

describe('output', () => {
  it('is a table on a terminal and JSON when piped, unless --output says', () => {
    expect(outputMode(undefined, true)).toBe('table');
    expect(outputMode(undefined, false)).toBe('json');
    expect(outputMode('json', true)).toBe('json');
    expect(outputMode('table', false)).toBe('table');
    expect(() => outputMode('yaml', true)).toThrow(/not one of: table, json/);
  });

  it('prints the API objects as JSON, and the chosen columns as a table without colours', () => {
    const rows = [
      { id: 'a', n: 1, extra: { x: 1 } },
      { id: 'b', n: 22, extra: null },
    ];
    const cols = [
      { header: 'ID', value: (r: (typeof rows)[number]) => r.id },
      { header: 'N', value: (r: (typeof rows)[number]) => r.n },
      { header: 'EXTRA', value: (r: (typeof rows)[number]) => r.extra },
    ];
    let printed = '';
    new Output('json', (s) => (printed += s)).list(rows, cols);
    expect(JSON.parse(printed)).toEqual(rows);
    const table = renderTable(rows, cols);
    expect(table).not.toContain('\u001b[');
    const lines = table.split('\n');
    expect(lines[1]).toMatch(/│ ID\s+│ N\s+│ EXTRA\s+│/);
    expect(table).toMatch(/│ a\s+│ 1\s+│ \{"x":1\}\s+│/);
    printed = '';
    new Output('table', (s) => (printed += s)).list([], cols);
    expect(printed).toBe('(none)\n');
  });

  it('prints an action as a sentence on a terminal and as its result in JSON', () => {
    let printed = '';
    new Output('table', (s) => (printed += s)).done({ id: 'x' }, 'deleted x');
    expect(printed).toBe('deleted x\n');
    printed = '';
    new Output('json', (s) => (printed += s)).done({ id: 'x' }, 'deleted x');
    expect(JSON.parse(printed)).toEqual({ id: 'x' });
  });
});
