import { cpSync, lstatSync, mkdirSync, renameSync, rmSync, statfsSync, statSync } from 'node:fs';
import { posix } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { Code, ConnectError, type ServiceImpl } from '@connectrpc/connect';
import type { Filesystem } from '@aenv/protocol/envd';
import {
  EventType,
  FilesystemEventSchema,
  WatchDirResponseSchema,
  type FilesystemEvent,
  type WatchDirResponse,
} from '@aenv/protocol/envd';
import { rpcUser, type EnvdContext } from '../context.js';
import { EventQueue, KEEPALIVE, keepaliveIntervalMs } from '../event-queue.js';
import type { SandboxUser } from '../users/user-db.js';
import { entryInfo, type EntryInfoDeps } from './entry-info.js';
import { errnoCode, fsConnectError } from './errors.js';
import { listDir } from './list-dir.js';
import { resolveUserPath } from './paths.js';
import { DirWatch, InotifyHub, type DirEvent } from './watch.js';

/** statfs magic numbers of network filesystems (watching them needs allowNetworkMounts). */
const NETWORK_FS = new Set([0x6969, 0xff534d42, 0x517b, 0xfe534d42, 0x65735546]);
const MAX_WATCHER_EVENTS = 10_000;

export interface WatchRequestLike {
  path: string;
  recursive: boolean;
  includeEntry: boolean;
  allowNetworkMounts: boolean;
}

/** The `filesystem.Filesystem` service; every fs call runs with the requesting user's credentials. */
export function filesystemService(ctx: EnvdContext): Partial<ServiceImpl<typeof Filesystem>> {
  const deps: EntryInfoDeps = { users: ctx.users, native: ctx.native };
  const hub = ctx.native ? new InotifyHub(ctx.native) : undefined;
  const watchers = new Map<string, { watch: DirWatch; events: FilesystemEvent[] }>();
  let watcherSeq = 0;

  function resolve(user: SandboxUser, path: string): string {
    try {
      return resolveUserPath(path, user, ctx.state.defaultWorkdir);
    } catch (err) {
      throw fsConnectError(err, path);
    }
  }

  function asUser<T>(user: SandboxUser, what: string, fn: () => T): T {
    try {
      return ctx.asUser(user, fn);
    } catch (err) {
      throw fsConnectError(err, what);
    }
  }

  /** Validates the directory and starts watching it; events go to onEvent. */
  function startWatch(
    user: SandboxUser,
    req: WatchRequestLike,
    onEvent: (e: FilesystemEvent) => void,
  ): DirWatch {
    if (!hub) throw new ConnectError('watching is not available (native helper missing)', Code.Unimplemented);
    const root = resolve(user, req.path);
    asUser(user, root, () => {
      if (!statSync(root).isDirectory())
        throw new ConnectError(`path '${root}' is not a directory`, Code.InvalidArgument);
      if (!req.allowNetworkMounts && NETWORK_FS.has(Number(statfsSync(root).type))) {
        throw new ConnectError(
          `path '${root}' is on a network mount; set allowNetworkMounts to watch it`,
          Code.FailedPrecondition,
        );
      }
    });
    const toEvent = (e: DirEvent): FilesystemEvent => {
      let entry;
      if (req.includeEntry && e.type !== EventType.REMOVE && e.type !== EventType.RENAME) {
        try {
          entry = ctx.asUser(user, () => entryInfo(posix.join(root, e.name), deps));
        } catch {
          entry = undefined;
        }
      }
      return create(FilesystemEventSchema, { name: e.name, type: e.type, entry });
    };
    const watch = new DirWatch(
      hub,
      root,
      req.recursive,
      (fn) => ctx.asUser(user, fn),
      (e) => onEvent(toEvent(e)),
    );
    try {
      watch.start();
    } catch (err) {
      watch.stop();
      throw fsConnectError(err, root);
    }
    return watch;
  }

  return {
    stat(req, hctx) {
      const user = rpcUser(ctx, hctx.requestHeader);
      const path = resolve(user, req.path);
      return { entry: asUser(user, path, () => entryInfo(path, deps)) };
    },

    makeDir(req, hctx) {
      const user = rpcUser(ctx, hctx.requestHeader);
      const path = resolve(user, req.path);
      return {
        entry: asUser(user, path, () => {
          let st;
          try {
            st = statSync(path);
          } catch (err) {
            if (errnoCode(err) !== 'ENOENT') throw err;
          }
          if (st?.isDirectory())
            throw new ConnectError(`directory already exists: ${path}`, Code.AlreadyExists);
          if (st)
            throw new ConnectError(
              `path already exists but it is not a directory: ${path}`,
              Code.InvalidArgument,
            );
          mkdirSync(path, { recursive: true, mode: 0o755 });
          return entryInfo(path, deps);
        }),
      };
    },

    move(req, hctx) {
      const user = rpcUser(ctx, hctx.requestHeader);
      const source = resolve(user, req.source);
      const destination = resolve(user, req.destination);
      return {
        entry: asUser(user, `${source} -> ${destination}`, () => {
          lstatSync(source); // not_found before creating anything
          mkdirSync(posix.dirname(destination), { recursive: true, mode: 0o755 });
          try {
            renameSync(source, destination);
          } catch (err) {
            // overlayfs refuses to rename directories that live in a lower layer: copy, then remove.
            if (errnoCode(err) !== 'EXDEV') throw err;
            cpSync(source, destination, {
              recursive: true,
              preserveTimestamps: true,
              verbatimSymlinks: true,
              errorOnExist: false,
              force: true,
            });
            rmSync(source, { recursive: true, force: true });
          }
          return entryInfo(destination, deps);
        }),
      };
    },

    listDir(req, hctx) {
      const user = rpcUser(ctx, hctx.requestHeader);
      const path = resolve(user, req.path);
      return { entries: asUser(user, path, () => listDir(path, req.depth || 1, deps)) };
    },

    remove(req, hctx) {
      const user = rpcUser(ctx, hctx.requestHeader);
      const path = resolve(user, req.path);
      asUser(user, path, () => rmSync(path, { recursive: true, force: true }));
      return {};
    },

    async *watchDir(req, hctx) {
      const user = rpcUser(ctx, hctx.requestHeader);
      const queue = new EventQueue<FilesystemEvent>();
      const watch = startWatch(user, req, (e) => queue.push(e));
      try {
        yield create(WatchDirResponseSchema, { event: { case: 'start', value: {} } });
        const keepalive = keepaliveIntervalMs(hctx.requestHeader.get('keepalive-ping-interval'));
        for await (const e of queue.drain(hctx.signal, keepalive)) {
          const msg: WatchDirResponse =
            e === KEEPALIVE
              ? create(WatchDirResponseSchema, { event: { case: 'keepalive', value: {} } })
              : create(WatchDirResponseSchema, { event: { case: 'filesystem', value: e } });
          yield msg;
        }
      } finally {
        watch.stop();
      }
    },

    createWatcher(req, hctx) {
      const user = rpcUser(ctx, hctx.requestHeader);
      const id = `w${++watcherSeq}-${Math.random().toString(36).slice(2, 10)}`;
      const events: FilesystemEvent[] = [];
      const watch = startWatch(user, req, (e) => {
        events.push(e);
        if (events.length > MAX_WATCHER_EVENTS) events.shift();
      });
      watchers.set(id, { watch, events });
      return { watcherId: id };
    },

    getWatcherEvents(req, hctx) {
      rpcUser(ctx, hctx.requestHeader);
      const w = watchers.get(req.watcherId);
      if (!w) throw new ConnectError(`watcher with id ${req.watcherId} not found`, Code.NotFound);
      return { events: w.events.splice(0, w.events.length) };
    },

    removeWatcher(req, hctx) {
      rpcUser(ctx, hctx.requestHeader);
      const w = watchers.get(req.watcherId);
      if (!w) throw new ConnectError(`watcher with id ${req.watcherId} not found`, Code.NotFound);
      w.watch.stop();
      watchers.delete(req.watcherId);
      return {};
    },
  };
}
