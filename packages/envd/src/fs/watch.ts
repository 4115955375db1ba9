import { lstatSync, readdirSync } from 'node:fs';
import { posix } from 'node:path';
import { EventType } from '@aenv/protocol/envd';
import type { NativeApi } from '../native.js';

// inotify(7) bits
const IN_MODIFY = 0x2;
const IN_ATTRIB = 0x4;
const IN_MOVED_FROM = 0x40;
const IN_MOVED_TO = 0x80;
const IN_CREATE = 0x100;
const IN_DELETE = 0x200;
const IN_DELETE_SELF = 0x400;
const IN_MOVE_SELF = 0x800;
const IN_Q_OVERFLOW = 0x4000;
const IN_IGNORED = 0x8000;
const IN_ONLYDIR = 0x1000000;
const IN_ISDIR = 0x40000000;

const WATCH_MASK =
  IN_MODIFY |
  IN_ATTRIB |
  IN_MOVED_FROM |
  IN_MOVED_TO |
  IN_CREATE |
  IN_DELETE |
  IN_DELETE_SELF |
  IN_MOVE_SELF |
  IN_ONLYDIR;

/** fsnotify's mapping, which E2B's envd reports: moved-to counts as a create, moved-from as a rename. */
export function eventTypeOf(mask: number): EventType {
  if (mask & (IN_CREATE | IN_MOVED_TO)) return EventType.CREATE;
  if (mask & IN_MODIFY) return EventType.WRITE;
  if (mask & IN_DELETE) return EventType.REMOVE;
  if (mask & IN_MOVED_FROM) return EventType.RENAME;
  if (mask & IN_ATTRIB) return EventType.CHMOD;
  return EventType.UNSPECIFIED;
}

interface WatchOwner {
  onInotify(wd: number, mask: number, name: string): void;
}

/** The process-wide inotify instance, shared by every watch (the kernel hands out one wd per inode). */
export class InotifyHub {
  private started = false;
  private readonly owners = new Map<number, Set<WatchOwner>>();

  constructor(private readonly native: NativeApi) {}

  add(path: string, owner: WatchOwner): number {
    if (!this.started) {
      this.native.watchStart((events) => this.dispatch(events));
      this.started = true;
    }
    const wd = this.native.watchAdd(path, WATCH_MASK);
    let set = this.owners.get(wd);
    if (!set) this.owners.set(wd, (set = new Set()));
    set.add(owner);
    return wd;
  }

  remove(wd: number, owner: WatchOwner): void {
    const set = this.owners.get(wd);
    if (!set) return;
    set.delete(owner);
    if (set.size === 0) {
      this.owners.delete(wd);
      this.native.watchRemove(wd);
    }
  }

  get watchCount(): number {
    return this.owners.size;
  }

  private dispatch(events: [number, number, number, string][]): void {
    for (const [wd, mask, , name] of events) {
      if (mask & IN_Q_OVERFLOW) continue;
      const set = this.owners.get(wd);
      if (!set) continue;
      if (mask & IN_IGNORED) this.owners.delete(wd);
      for (const owner of [...set]) owner.onInotify(wd, mask, name);
    }
  }
}

export interface DirEvent {
  /** Path relative to the watched directory. */
  name: string;
  type: EventType;
}

/**
 * Watches one directory (optionally its whole tree, following new subdirectories) and reports events
 * with names relative to it. `addWatch` runs inotify_add_watch with the caller's credentials.
 */
export class DirWatch implements WatchOwner {
  private readonly wdPaths = new Map<number, string>();
  private stopped = false;

  constructor(
    private readonly hub: InotifyHub,
    readonly root: string,
    private readonly recursive: boolean,
    private readonly runAsUser: <T>(fn: () => T) => T,
    private readonly onEvent: (e: DirEvent) => void,
  ) {}

  /** Throws (ENOENT, ENOTDIR, EACCES…) when the root cannot be watched. */
  start(): void {
    this.runAsUser(() => {
      this.wdPaths.set(this.hub.add(this.root, this), '');
      if (this.recursive) this.addSubdirs(this.root, '');
    });
  }

  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    for (const wd of this.wdPaths.keys()) this.hub.remove(wd, this);
    this.wdPaths.clear();
  }

  onInotify(wd: number, mask: number, name: string): void {
    const dir = this.wdPaths.get(wd);
    if (dir === undefined || this.stopped) return;
    if (mask & IN_IGNORED) {
      this.wdPaths.delete(wd);
      return;
    }
    if (mask & (IN_DELETE_SELF | IN_MOVE_SELF) || !name) return; // the parent directory reports these
    const rel = dir ? `${dir}/${name}` : name;
    if (this.recursive && mask & IN_ISDIR && mask & (IN_CREATE | IN_MOVED_TO)) {
      try {
        this.runAsUser(() => {
          const abs = posix.join(this.root, rel);
          this.wdPaths.set(this.hub.add(abs, this), rel);
          this.addSubdirs(abs, rel);
        });
      } catch {
        /* gone again or unreadable */
      }
    }
    const type = eventTypeOf(mask);
    if (type !== EventType.UNSPECIFIED) this.onEvent({ name: rel, type });
  }

  private addSubdirs(abs: string, rel: string): void {
    let names: string[];
    try {
      names = readdirSync(abs);
    } catch {
      return;
    }
    for (const name of names) {
      const childAbs = posix.join(abs, name);
      const childRel = rel ? `${rel}/${name}` : name;
      try {
        if (!lstatSync(childAbs).isDirectory()) continue;
        this.wdPaths.set(this.hub.add(childAbs, this), childRel);
      } catch {
        continue;
      }
      this.addSubdirs(childAbs, childRel);
    }
  }
}
