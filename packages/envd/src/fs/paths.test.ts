import { describe, expect, it } from 'vitest';
import type { SandboxUser } from '../users/user-db.js';
import { PathError, resolveUserPath } from './paths.js';

const user: SandboxUser = {
  name: 'user',
  uid: 1000,
  gid: 1000,
  home: '/home/user',
  shell: '/bin/bash',
  groups: [1000],
};

describe('resolveUserPath', () => {
  it('resolves relative paths against the home and expands ~', () => {
    expect(resolveUserPath('a.txt', user)).toBe('/home/user/a.txt');
    expect(resolveUserPath('./d/../b.txt', user)).toBe('/home/user/b.txt');
    expect(resolveUserPath('~', user)).toBe('/home/user');
    expect(resolveUserPath('~/x/y', user)).toBe('/home/user/x/y');
    expect(resolveUserPath('/etc//hosts', user)).toBe('/etc/hosts');
  });

  it('uses the default workdir (else home) for an empty path', () => {
    expect(resolveUserPath('', user)).toBe('/home/user');
    expect(resolveUserPath('', user, '/work')).toBe('/work');
    expect(resolveUserPath('rel', user, '/work')).toBe('/home/user/rel');
  });

  it('never climbs above /', () => {
    expect(resolveUserPath('../../../../etc/passwd', user)).toBe('/etc/passwd');
    expect(resolveUserPath('/../../x', user)).toBe('/x');
  });

  it('rejects ~otheruser and NUL bytes', () => {
    expect(() => resolveUserPath('~root/x', user)).toThrow(PathError);
    expect(() => resolveUserPath('a\0b', user)).toThrow(PathError);
  });
});
