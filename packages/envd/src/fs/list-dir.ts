import { lstatSync, readdirSync, statSync } from 'node:fs';
import { posix } from 'node:path';
import { Code, ConnectError } from '@connectrpc/connect';
import type { EntryInfo } from '@aenv/protocol/envd';
import { entryInfo, type EntryInfoDeps } from './entry-info.js';

const byBytes = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/**
 * Entries under root down to `depth` levels, in Go filepath.WalkDir order: pre-order, each directory's
 * names sorted bytewise; the root itself is not listed and symlinks are never descended into.
 * Subdirectories the user cannot read are listed but not descended into. Synchronous: run in asUser.
 */
export function listDir(root: string, depth: number, deps: EntryInfoDeps): EntryInfo[] {
  const st = statSync(root);
  if (!st.isDirectory()) throw new ConnectError(`path '${root}' is not a directory`, Code.InvalidArgument);
  const maxDepth = Math.max(1, depth);
  const out: EntryInfo[] = [];
  const walk = (dir: string, level: number) => {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch (err) {
      if (level === 1) throw err;
      return;
    }
    names.sort(byBytes);
    for (const name of names) {
      const path = posix.join(dir, name);
      let lst;
      try {
        lst = lstatSync(path, { bigint: true });
      } catch {
        continue; // vanished while listing
      }
      out.push(entryInfo(path, deps, lst));
      if (lst.isDirectory() && level < maxDepth) walk(path, level + 1);
    }
  };
  walk(root, 1);
  return out;
}
