import { statSync, readFileSync } from 'node:fs';

export interface SandboxUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
  /** Supplementary groups as initgroups(3) computes them: the primary gid plus every group listing the user. */
  groups: number[];
}

interface Parsed {
  byName: Map<string, Omit<SandboxUser, 'groups'>>;
  uidNames: Map<number, string>;
  gidNames: Map<number, string>;
  members: Map<string, number[]>;
}

const ROOT: Omit<SandboxUser, 'groups'> = { name: 'root', uid: 0, gid: 0, home: '/root', shell: '/bin/sh' };

function readOr(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

function fileKey(path: string): string {
  try {
    const s = statSync(path, { bigint: true });
    return `${s.ino}:${s.size}:${s.mtimeNs}`;
  } catch {
    return 'missing';
  }
}

/**
 * Users and groups of the sandbox, read from its /etc/passwd and /etc/group (not NSS: the rootfs is
 * arbitrary and envd is a static-ish portable binary). Re-read whenever either file changes, so users
 * created inside the sandbox (`useradd`) work without restarting envd.
 */
export class UserDb {
  private key = '';
  private parsed: Parsed | undefined;

  constructor(
    private readonly passwdPath = '/etc/passwd',
    private readonly groupPath = '/etc/group',
  ) {}

  lookup(name: string): SandboxUser | undefined {
    const p = this.load();
    const user = p.byName.get(name) ?? (name === 'root' ? ROOT : undefined);
    if (!user) return undefined;
    const groups = [user.gid, ...(p.members.get(user.name) ?? [])];
    return { ...user, groups: [...new Set(groups)] };
  }

  userName(uid: number): string {
    return this.load().uidNames.get(uid) ?? (uid === 0 ? 'root' : String(uid));
  }

  groupName(gid: number): string {
    return this.load().gidNames.get(gid) ?? (gid === 0 ? 'root' : String(gid));
  }

  private load(): Parsed {
    const key = `${fileKey(this.passwdPath)}|${fileKey(this.groupPath)}`;
    if (this.parsed && key === this.key) return this.parsed;
    this.parsed = parseUserFiles(readOr(this.passwdPath), readOr(this.groupPath));
    this.key = key;
    return this.parsed;
  }
}

export function parseUserFiles(passwd: string, group: string): Parsed {
  const byName = new Map<string, Omit<SandboxUser, 'groups'>>();
  const uidNames = new Map<number, string>();
  for (const line of passwd.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const [name, , uidS, gidS, , home, shell] = line.split(':');
    const uid = Number(uidS);
    const gid = Number(gidS);
    if (!name || !Number.isInteger(uid) || !Number.isInteger(gid) || uid < 0 || gid < 0) continue;
    if (!byName.has(name)) byName.set(name, { name, uid, gid, home: home || '/', shell: shell || '/bin/sh' });
    if (!uidNames.has(uid)) uidNames.set(uid, name);
  }
  const gidNames = new Map<number, string>();
  const members = new Map<string, number[]>();
  for (const line of group.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const [name, , gidS, list] = line.split(':');
    const gid = Number(gidS);
    if (!name || !Number.isInteger(gid) || gid < 0) continue;
    if (!gidNames.has(gid)) gidNames.set(gid, name);
    for (const member of (list ?? '').split(',')) {
      const m = member.trim();
      if (!m) continue;
      const gids = members.get(m) ?? [];
      gids.push(gid);
      members.set(m, gids);
    }
  }
  return { byName, uidNames, gidNames, members };
}
