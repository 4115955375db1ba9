// Turns an overlay upper dir (what a sandbox changed) into a portable OCI layer tar:
//   - owners shifted back from the sandboxes' host uid range to container ids (so any node can shift them again),
//   - overlay whiteouts (0/0 character devices) become `.wh.<name>` entries,
//   - opaque directories (trusted.overlay.opaque=y) get a `.wh..wh..opq` entry,
//   - file capabilities are rewritten for the container root; every other xattr is dropped.
// GNU tar reads the directory (it knows every file type and xattrs); image/tar-reader.ts parses its output
// byte-exactly and tar-writer.ts writes the result. `--sort=name` makes the output a function of the content,
// so an unchanged upper exports to the same digest and the repository stores it once.
import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { shiftFileCapability } from '../image/file-caps.js';
import { readTar, type TarHeader } from '../image/tar-reader.js';
import { tarEnd, tarHeader, tarPadding, type TarWriteHeader } from './tar-writer.js';

export interface IdShift {
  hostStart: number;
  size: number;
}

export interface ExportOptions {
  idMap: IdShift;
  /** Paths (relative, no leading slash) left out, e.g. files the runtime writes into every upper. */
  exclude?: readonly string[];
  tarPath?: string;
}

export interface ExportStats {
  entries: number;
  whiteouts: number;
  opaqueDirs: number;
  skippedDevices: number;
  clampedIds: number;
  bytes: number;
}

/** Files the container runtime writes into every sandbox's upper; they belong to the sandbox, not the template. */
export const RUNTIME_WRITTEN_FILES = ['etc/hosts', 'etc/hostname', 'etc/resolv.conf'];

const NOBODY = 65534;

function baseOf(name: string): { dir: string; base: string } {
  const i = name.lastIndexOf('/');
  return i < 0 ? { dir: '', base: name } : { dir: name.slice(0, i), base: name.slice(i + 1) };
}

function join(dir: string, base: string): string {
  return dir ? `${dir}/${base}` : base;
}

function clean(name: string): string {
  return name
    .replace(/^(\.\/)+/, '')
    .replace(/^\.$/, '')
    .replace(/\/+$/, '');
}

class Writer {
  bytes = 0;
  constructor(private readonly out: NodeJS.WritableStream) {}
  async write(buf: Buffer): Promise<void> {
    this.bytes += buf.length;
    if (!this.out.write(buf)) await once(this.out as NodeJS.EventEmitter, 'drain');
  }
}

/** Exports `upperDir` into a new file `dest` (created, must not exist). */
export async function exportUpperAsLayer(
  upperDir: string,
  dest: string,
  opts: ExportOptions,
): Promise<ExportStats> {
  const { hostStart, size } = opts.idMap;
  const unshift = (id: number, stats: ExportStats): number => {
    if (id >= hostStart && id < hostStart + size) return id - hostStart;
    stats.clampedIds++;
    return NOBODY;
  };
  const excludes = (opts.exclude ?? RUNTIME_WRITTEN_FILES).flatMap((p) => [
    '--exclude',
    `./${p.replace(/^\/+/, '')}`,
  ]);
  const child = spawn(
    opts.tarPath ?? 'tar',
    [
      '--create',
      '--file=-',
      '--directory',
      upperDir,
      '--numeric-owner',
      '--format=posix',
      '--sort=name',
      '--xattrs',
      '--xattrs-include=trusted.overlay.opaque',
      '--xattrs-include=security.capability',
      '--pax-option=delete=atime,delete=ctime',
      '--no-wildcards',
      ...excludes,
      '.',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  const exited = new Promise<number>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve(code ?? -1));
  });

  const file = createWriteStream(dest, { flags: 'wx', mode: 0o600 });
  const fileDone = new Promise<void>((resolve, reject) => {
    file.on('finish', resolve);
    file.on('error', reject);
  });
  const w = new Writer(file);
  const stats: ExportStats = {
    entries: 0,
    whiteouts: 0,
    opaqueDirs: 0,
    skippedDevices: 0,
    clampedIds: 0,
    bytes: 0,
  };
  try {
    for await (const e of readTar(child.stdout)) {
      const h: TarHeader = e.header;
      const name = clean(h.name);
      if (name === '') continue;
      const { dir, base } = baseOf(name);
      if (h.type === 'chardev' || h.type === 'blockdev') {
        if (h.type === 'chardev' && h.devmajor === 0 && h.devminor === 0) {
          await w.write(
            tarHeader({
              name: join(dir, `.wh.${base}`),
              type: 'file',
              mode: 0o600,
              uid: 0,
              gid: 0,
              mtime: h.mtime,
              size: 0,
            }),
          );
          stats.whiteouts++;
          stats.entries++;
        } else {
          stats.skippedDevices++;
        }
        continue;
      }
      // (after whiteouts: the kernel makes those as the mounter, host root, which is no sandbox id)
      const uid = unshift(h.uid, stats);
      const gid = unshift(h.gid, stats);
      const xattrs = new Map<string, Buffer>();
      const cap = h.xattrs.get('security.capability');
      if (cap && h.type === 'file') {
        const shifted = shiftFileCapability(cap, (id) =>
          id >= hostStart && id < hostStart + size ? id - hostStart : 0,
        );
        if (shifted) xattrs.set('security.capability', shifted);
      }
      const out: TarWriteHeader = {
        name,
        type: h.type,
        mode: h.mode,
        uid,
        gid,
        mtime: Math.floor(h.mtime),
        ...(h.type === 'file' ? { size: h.size } : {}),
        ...(h.type === 'symlink' ? { linkname: h.linkname } : {}),
        ...(h.type === 'hardlink' ? { linkname: clean(h.linkname) } : {}),
        ...(xattrs.size ? { xattrs } : {}),
      };
      await w.write(tarHeader(out));
      stats.entries++;
      if (h.type === 'file') {
        for await (const chunk of e.body()) await w.write(chunk);
        await w.write(tarPadding(h.size));
      }
      if (h.type === 'directory' && h.xattrs.get('trusted.overlay.opaque')?.toString('latin1') === 'y') {
        await w.write(
          tarHeader({
            name: join(name, '.wh..wh..opq'),
            type: 'file',
            mode: 0o600,
            uid: 0,
            gid: 0,
            mtime: h.mtime,
            size: 0,
          }),
        );
        stats.opaqueDirs++;
        stats.entries++;
      }
    }
    await w.write(tarEnd());
    file.end();
    await fileDone;
  } catch (e) {
    child.kill('SIGKILL');
    file.destroy();
    await exited.catch(() => {});
    throw e;
  }
  const code = await exited;
  // 1 = "some files differ/changed while read": the upper must be quiescent (frozen or a snapshot) when exported.
  if (code !== 0)
    throw new Error(
      `tar of ${upperDir} exited with ${code}: ${stderr.trim().split('\n').slice(-3).join('; ')}`,
    );
  stats.bytes = w.bytes;
  return stats;
}
