import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { UserDb } from './user-db.js';

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

function db(passwd: string, group: string): { users: UserDb; passwd: string } {
  dir = mkdtempSync('/tmp/aenv-userdb-');
  writeFileSync(join(dir, 'passwd'), passwd);
  writeFileSync(join(dir, 'group'), group);
  return { users: new UserDb(join(dir, 'passwd'), join(dir, 'group')), passwd: join(dir, 'passwd') };
}

describe('UserDb', () => {
  it('looks users up with initgroups-style supplementary groups', () => {
    const { users } = db(
      'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/bash\n# comment\nbroken:line\n',
      'root:x:0:\nuser:x:1000:\nsudo:x:27:user,other\ndocker:x:999: user \n',
    );
    expect(users.lookup('user')).toEqual({
      name: 'user',
      uid: 1000,
      gid: 1000,
      home: '/home/user',
      shell: '/bin/bash',
      groups: [1000, 27, 999],
    });
    expect(users.lookup('root')?.groups).toEqual([0]);
    expect(users.lookup('nobody')).toBeUndefined();
    expect(users.userName(1000)).toBe('user');
    expect(users.userName(4242)).toBe('4242');
    expect(users.groupName(27)).toBe('sudo');
    expect(users.groupName(4242)).toBe('4242');
  });

  it('falls back to a built-in root when passwd is missing', () => {
    const users = new UserDb('/nonexistent/passwd', '/nonexistent/group');
    expect(users.lookup('root')).toMatchObject({ uid: 0, gid: 0, home: '/root' });
    expect(users.userName(0)).toBe('root');
  });

  it('notices users added after start', () => {
    const { users, passwd } = db('root:x:0:0::/root:/bin/sh\n', 'root:x:0:\n');
    expect(users.lookup('late')).toBeUndefined();
    writeFileSync(passwd, 'root:x:0:0::/root:/bin/sh\nlate:x:1001:1001::/home/late:/bin/sh\n');
    expect(users.lookup('late')?.uid).toBe(1001);
  });
});
