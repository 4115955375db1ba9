// CRIU restores a sandbox's user namespace with the uid/gid maps it dumped (userns-<id>.img), and every other
// id in the images is relative to that namespace (CRIU translates creds, ghost files and IPC owners on dump,
// and archives tmpfs contents from inside it). So a checkpoint restores into another range — a fork, a
// snapshot or template launch — once the maps in that image name the new range. Everything else in the images
// is shared with the original (hard links).
import { chmodSync, linkSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BinaryReader, BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import type { IdRange } from '../../driver.js';
import { RuntimeError } from '../../driver.js';

// A sandbox has one user namespace (nested ones are refused by seccomp).
const USERNS_IMAGE_RE = /^userns-\d+\.img$/;
// Every CRIU image but inventory.img starts with two magics (common and per image type).
const MAGIC_BYTES = 8;

interface Extent {
  first: number;
  lowerFirst: number;
  count: number;
}

// images/userns.proto: uid_gid_extent { first = 1; lower_first = 2; count = 3 }
function readExtent(bytes: Uint8Array): Extent {
  const r = new BinaryReader(bytes);
  const e: Extent = { first: 0, lowerFirst: 0, count: 0 };
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    if (wire !== WireType.Varint) throw new Error(`unexpected wire type ${wire} in uid_gid_extent`);
    const v = r.uint32();
    if (field === 1) e.first = v;
    else if (field === 2) e.lowerFirst = v;
    else if (field === 3) e.count = v;
  }
  return e;
}

function writeExtent(e: Extent): Uint8Array {
  return new BinaryWriter()
    .tag(1, WireType.Varint)
    .uint32(e.first)
    .tag(2, WireType.Varint)
    .uint32(e.lowerFirst)
    .tag(3, WireType.Varint)
    .uint32(e.count)
    .finish();
}

/**
 * Rewrites a user namespace image so its maps send the namespace's ids to `to` instead of `from`. Refuses an image
 * whose maps do not lie entirely in `from` (not a checkpoint of a sandbox of that range).
 */
export function rewriteUsernsImage(image: Uint8Array, from: IdRange, to: IdRange): Uint8Array {
  if (image.length < MAGIC_BYTES + 4) throw new Error('userns image is truncated');
  const view = new DataView(image.buffer, image.byteOffset, image.byteLength);
  const out: Uint8Array[] = [image.subarray(0, MAGIC_BYTES)];
  let extents = 0;
  for (let off = MAGIC_BYTES; off < image.length;) {
    const size = view.getUint32(off, true);
    const entry = image.subarray(off + 4, off + 4 + size);
    if (entry.length !== size) throw new Error('userns image entry is truncated');
    off += 4 + size;
    // userns_entry { repeated uid_gid_extent uid_map = 1; repeated uid_gid_extent gid_map = 2 }
    const r = new BinaryReader(entry);
    const w = new BinaryWriter();
    while (r.pos < r.len) {
      const [field, wire] = r.tag();
      if ((field === 1 || field === 2) && wire === WireType.LengthDelimited) {
        const e = readExtent(r.bytes());
        if (e.lowerFirst < from.hostStart || e.lowerFirst + e.count > from.hostStart + from.size) {
          throw new Error(
            `userns image maps ${e.first}+${e.count} to host ${e.lowerFirst}, outside the checkpoint's range ${from.hostStart}+${from.size}`,
          );
        }
        e.lowerFirst = e.lowerFirst - from.hostStart + to.hostStart;
        w.tag(field, WireType.LengthDelimited).bytes(writeExtent(e));
        extents++;
      } else {
        const start = r.pos;
        r.skip(wire, field);
        w.tag(field, wire).raw(entry.subarray(start, r.pos));
      }
    }
    const body = w.finish();
    const len = new Uint8Array(4);
    new DataView(len.buffer).setUint32(0, body.length, true);
    out.push(len, body);
  }
  if (extents === 0) throw new Error('userns image has no uid/gid maps');
  return Buffer.concat(out);
}

/** Name prefix of the views `imagesForRange` makes inside a checkpoint dir. */
export const USERNS_VIEW_PREFIX = '.userns-';

/**
 * A view of the checkpoint `imagesDir` restorable into `to`: a directory inside it holding hard links to
 * every image and a rewritten user namespace image. It lives in the checkpoint dir (same filesystem and subvolume, so
 * links work; removed with it after a crash); the caller removes it after the restore.
 */
export async function imagesForRange(
  imagesDir: string,
  name: string,
  from: IdRange,
  to: IdRange,
): Promise<string> {
  // Synchronous calls: a checkpoint holds ~70 small files in the page cache, each a few µs here, and a fork's
  // children do this at once: through the thread pool (4 threads) they queued for 20–50 ms each.
  const dir = join(imagesDir, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir);
  // Searchable like the checkpoint dir itself (CRIU reads images from inside the restored namespace),
  // whatever the server's umask.
  chmodSync(dir, 0o711);
  let rewritten = false;
  try {
    for (const e of readdirSync(imagesDir, { withFileTypes: true })) {
      if (!e.isFile()) continue;
      if (!USERNS_IMAGE_RE.test(e.name)) {
        linkSync(join(imagesDir, e.name), join(dir, e.name));
        continue;
      }
      if (rewritten)
        throw new RuntimeError('RestoreFailed', `checkpoint ${imagesDir} has more than one user namespace`);
      let image: Uint8Array;
      try {
        image = rewriteUsernsImage(readFileSync(join(imagesDir, e.name)), from, to);
      } catch (err) {
        throw new RuntimeError(
          'RestoreFailed',
          `checkpoint ${imagesDir}: cannot move its user namespace to uid range ${to.hostStart}+${to.size}: ${(err as Error).message}`,
        );
      }
      writeFileSync(join(dir, e.name), image, { mode: 0o644 });
      chmodSync(join(dir, e.name), 0o644); // like the checkpoint's other images (see the driver), whatever the umask
      rewritten = true;
    }
    if (!rewritten)
      throw new RuntimeError('RestoreFailed', `checkpoint ${imagesDir} has no user namespace image`);
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return dir;
}
