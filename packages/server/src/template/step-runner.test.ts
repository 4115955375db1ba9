import { describe, expect, it } from 'vitest';
import { copySourcePrefix, directoryMode } from './step-runner.js';

describe('COPY helpers', () => {
  it('takes the source up to its first glob component (the SDK already chose the files)', () => {
    expect(copySourcePrefix('hello.txt')).toBe('hello.txt');
    expect(copySourcePrefix('./dir/')).toBe('dir');
    expect(copySourcePrefix('src/*.js')).toBe('src');
    expect(copySourcePrefix('a/b/**/c')).toBe('a/b');
    expect(copySourcePrefix('*')).toBe('');
    expect(copySourcePrefix('.')).toBe('');
  });

  it('gives directories search permission where they are readable', () => {
    expect(directoryMode(0o644)).toBe(0o755);
    expect(directoryMode(0o600)).toBe(0o700);
    expect(directoryMode(0o640)).toBe(0o750);
    expect(directoryMode(0o755)).toBe(0o755);
  });
});
