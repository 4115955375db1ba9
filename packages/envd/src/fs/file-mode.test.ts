import { describe, expect, it } from 'vitest';
import { goFileModeString } from './file-mode.js';

describe('goFileModeString', () => {
  it('formats modes like Go os.FileMode.String()', () => {
    expect(goFileModeString(0o100644)).toBe('-rw-r--r--');
    expect(goFileModeString(0o100755)).toBe('-rwxr-xr-x');
    expect(goFileModeString(0o040755)).toBe('drwxr-xr-x');
    expect(goFileModeString(0o041777)).toBe('dtrwxrwxrwx');
    expect(goFileModeString(0o120777)).toBe('Lrwxrwxrwx');
    expect(goFileModeString(0o104755)).toBe('urwxr-xr-x');
    expect(goFileModeString(0o102755)).toBe('grwxr-xr-x');
    expect(goFileModeString(0o020666)).toBe('Dcrw-rw-rw-');
    expect(goFileModeString(0o060660)).toBe('Drw-rw----');
    expect(goFileModeString(0o010644)).toBe('prw-r--r--');
    expect(goFileModeString(0o140755)).toBe('Srwxr-xr-x');
    expect(goFileModeString(0o100000)).toBe('----------');
  });
});
