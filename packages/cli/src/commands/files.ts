// `aenv upload` / `aenv download`: files and directory trees between here and a sandbox, through envd's
// `/files` and filesystem RPCs. A sandbox is hostile: names it lists are checked before they become local
// paths, and symlinks are not followed either way.
import {
  createReadStream,
  createWriteStream,
  lstatSync,
  mkdirSync,
  readdirSync,
  rmSync,
  type Stats,
} from 'node:fs';
import { basename, join, posix } from 'node:path';
import type { Command } from 'commander';
import { FileType, type EnvdRpcClient } from '@aenv/protocol';
import { clientAction, withGlobalFlags } from '../client/context.js';
import { CliError, usageError } from '../client/errors.js';

interface FileFlags {
  user?: string;
  force?: boolean;
}

/** Counts what a transfer moved, for its summary. */
interface Moved {
  files: number;
  bytes: number;
  skipped: string[];
}

async function uploadTree(envd: EnvdRpcClient, local: string, remote: string, user: string, moved: Moved) {
  const st = lstatSync(local);
  if (st.isDirectory()) {
    await envd.makeDir(remote, user || undefined);
    for (const name of readdirSync(local).sort()) {
      await uploadTree(envd, join(local, name), posix.join(remote, name), user, moved);
    }
  } else if (st.isFile()) {
    await envd.uploadFile(remote, createReadStream(local), st.size, user);
    moved.files++;
    moved.bytes += st.size;
  } else {
    moved.skipped.push(local);
  }
}

/** A name a sandbox listed, safe to join under a local directory. */
function safeName(name: string, where: string): string {
  if (!name || name === '.' || name === '..' || name.includes('/') || name.includes('\0')) {
    throw new CliError('failure', `the sandbox listed an unsafe name ${JSON.stringify(name)} in ${where}`);
  }
  return name;
}

async function downloadFileTo(
  envd: EnvdRpcClient,
  remote: string,
  local: string,
  f: FileFlags,
  moved: Moved,
) {
  const out = createWriteStream(local, { flags: f.force ? 'w' : 'wx', mode: 0o644 });
  await new Promise<void>((resolve, reject) => {
    out.once('open', () => resolve());
    out.once('error', (e: NodeJS.ErrnoException) =>
      reject(e.code === 'EEXIST' ? usageError(`${local} exists`, 'pass --force to overwrite it') : e),
    );
  });
  try {
    await envd.downloadFile(remote, out, f.user ?? '');
  } catch (e) {
    rmSync(local, { force: true });
    throw e;
  }
  moved.files++;
  moved.bytes += out.bytesWritten;
}

async function downloadTree(envd: EnvdRpcClient, remote: string, local: string, f: FileFlags, moved: Moved) {
  mkdirSync(local, { recursive: true, mode: 0o755 });
  for (const e of await envd.listDir(remote, 1, f.user)) {
    const target = join(local, safeName(e.name, remote));
    const from = posix.join(remote, e.name);
    if (e.type === FileType.DIRECTORY) await downloadTree(envd, from, target, f, moved);
    else if (e.type === FileType.FILE) await downloadFileTo(envd, from, target, f, moved);
    else moved.skipped.push(from);
  }
}

function localStat(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

function summary(verb: string, m: Moved, from: string, to: string): string {
  const skipped = m.skipped.length ? ` (skipped, not a file or directory: ${m.skipped.join(', ')})` : '';
  return `${verb} ${m.files} file${m.files === 1 ? '' : 's'}, ${m.bytes} bytes: ${from} -> ${to}${skipped}`;
}

export function registerFileCommands(program: Command): void {
  withGlobalFlags(
    program
      .command('upload')
      .argument('<id>', 'sandbox id')
      .argument('<local>', 'local file or directory')
      .argument('<remote>', 'path in the sandbox (a directory upload needs an absolute path)')
      .description('copy a file or a directory tree into a sandbox')
      .option('--user <user>', "owner of the files in the sandbox (default: the sandbox's default user)"),
  ).action(
    clientAction(async (ctx, id: string, local: string, remote: string, f: FileFlags) => {
      const st = localStat(local);
      if (!st) throw new CliError('notFound', `${local} does not exist`);
      if (st.isDirectory() && !remote.startsWith('/')) {
        throw usageError(`a directory goes to an absolute path, not ${JSON.stringify(remote)}`);
      }
      const { envd } = await ctx.envd(id);
      let target = remote;
      if (st.isFile()) {
        const there = remote.endsWith('/') ? undefined : await envd.stat(remote, f.user);
        if (remote.endsWith('/') || there?.type === FileType.DIRECTORY)
          target = posix.join(remote, basename(local));
      }
      const moved: Moved = { files: 0, bytes: 0, skipped: [] };
      await uploadTree(envd, local, target, f.user ?? '', moved);
      ctx.out.done({ sandboxID: id, path: target, ...moved }, summary('uploaded', moved, local, target));
    }),
  );

  withGlobalFlags(
    program
      .command('download')
      .argument('<id>', 'sandbox id')
      .argument('<remote>', 'file or directory in the sandbox')
      .argument('[local]', 'where to put it (default: its name, here)')
      .description('copy a file or a directory tree out of a sandbox')
      .option('--user <user>', "read as this user (default: the sandbox's default user)")
      .option('--force', 'overwrite local files'),
  ).action(
    clientAction(async (ctx, id: string, remote: string, local: string | undefined, f: FileFlags) => {
      const { envd } = await ctx.envd(id);
      const st = await envd.stat(remote, f.user);
      if (!st) throw new CliError('notFound', `${remote} does not exist in sandbox ${id}`);
      const name = safeName(posix.basename(st.path || remote), remote);
      let target = local ?? name;
      if (localStat(target)?.isDirectory() && st.type === FileType.FILE) target = join(target, name);
      const moved: Moved = { files: 0, bytes: 0, skipped: [] };
      if (st.type === FileType.DIRECTORY) await downloadTree(envd, st.path || remote, target, f, moved);
      else if (st.type === FileType.FILE) await downloadFileTo(envd, st.path || remote, target, f, moved);
      else throw usageError(`${remote} is neither a file nor a directory`);
      ctx.out.done({ sandboxID: id, path: target, ...moved }, summary('downloaded', moved, remote, target));
    }),
  );
}
