import { describe, expect, it } from 'vitest';
import { isDomainError } from '@aenv/protocol';
import { assertMountPath, assertVolumeName } from './names.js';

const refused = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    return isDomainError(e, 'invalid_argument');
  }
  return false;
};

describe('volume names', () => {
  it('takes plain names', () => {
    for (const n of ['a', 'data', 'My-Vol_2', 'x'.repeat(63)]) expect(assertVolumeName(n)).toBe(n);
  });
  it('refuses path-like, empty, long, odd and non-string names', () => {
    for (const n of [
      '',
      '.',
      '..',
      '../etc',
      'a/b',
      '-a',
      '_a',
      '.a',
      'x'.repeat(64),
      'a b',
      'a\0',
      'é',
      5,
      null,
      {},
    ])
      expect(
        refused(() => assertVolumeName(n)),
        JSON.stringify(n),
      ).toBe(true);
  });
});

describe('mount paths', () => {
  it('normalises a trailing slash and takes ordinary paths', () => {
    expect(assertMountPath('/mnt/data/')).toBe('/mnt/data');
    expect(assertMountPath('/home/user/work')).toBe('/home/user/work');
    expect(assertMountPath('/runner')).toBe('/runner');
  });
  it('refuses relative, root, dot segments, reserved paths and paths above them', () => {
    for (const p of [
      '',
      'mnt',
      '/',
      '//',
      '/mnt/../etc',
      '/./mnt',
      '/proc',
      '/proc/x',
      '/sys/fs',
      '/dev',
      '/agentenv',
      '/agentenv/bin',
      '/run',
      '/run/agentenv',
      '/etc',
      '/usr/local',
      '/mnt/a,b',
      '/mnt/a:b',
      '/mnt/a\nb',
      '/mnt/\0',
      `/${'a'.repeat(1025)}`,
      7,
    ])
      expect(
        refused(() => assertMountPath(p)),
        JSON.stringify(p),
      ).toBe(true);
  });
});
