// The write-back helper of durable pauses (native/aenv-writeback.c): files written into its directory are
// handed to the kernel's write-back while they are written, so they do not wait, dirty, for the flusher's
// 30 s. Observed through the `dirty` counter of a memory cgroup the writer runs in. Root only (cgroups).
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, rmdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../../util/exec.js';
import { buildWriteBackHelper, startWriteBack } from './write-back.js';

const MEMORY_CGROUPS = '/sys/fs/cgroup/memory';
const CAN_RUN = process.getuid?.() === 0 && existsSync(join(MEMORY_CGROUPS, 'memory.stat'));
const MIB = 1024 * 1024;

/** Dirty page-cache bytes charged to `cgroup`. */
async function dirtyBytes(cgroup: string): Promise<number> {
  const stat = await readFile(join(cgroup, 'memory.stat'), 'utf8');
  return Number(/^dirty (\d+)$/m.exec(stat)?.[1] ?? NaN);
}

/** Polls until `dirtyBytes(cgroup)` is at most `limit`, for at most `ms`; returns the last value. */
async function dirtyAfter(cgroup: string, limit: number, ms: number): Promise<number> {
  const end = Date.now() + ms;
  for (;;) {
    const d = await dirtyBytes(cgroup);
    if (d <= limit || Date.now() > end) return d;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Writes `mib` MiB to `file` with dd, from inside `cgroup` (so its page cache is charged there). */
async function writeInCgroup(cgroup: string, file: string, mib: number): Promise<void> {
  await run('sh', [
    '-c',
    `echo $$ > ${cgroup}/cgroup.procs && exec dd if=/dev/urandom of=${file} bs=1M count=${mib} status=none`,
  ]);
}

describe.skipIf(!CAN_RUN)('the write-back helper', () => {
  let base: string;
  let helper: string;
  const cgroups: string[] = [];

  beforeAll(async () => {
    base = await mkdtemp('/var/tmp/aenv-writeback-test-');
    helper = await buildWriteBackHelper(join(base, 'native'));
  });

  afterAll(async () => {
    for (const cg of cgroups) await rmdir(cg).catch(() => {});
    await rm(base, { recursive: true, force: true });
  });

  async function cgroup(name: string): Promise<string> {
    const cg = join(MEMORY_CGROUPS, `aenv-writeback-test-${process.pid}-${name}`);
    await mkdir(cg);
    cgroups.push(cg);
    return cg;
  }

  it('has what is written into its dir written back at once; without it the pages stay dirty', async () => {
    const without = await cgroup('without');
    const plain = join(base, 'plain');
    await mkdir(plain);
    await writeInCgroup(without, join(plain, 'pages-1.img'), 64);
    // The kernel's flusher leaves dirty pages alone for dirty_expire_centisecs (30 s by default).
    expect(await dirtyBytes(without)).toBeGreaterThan(32 * MIB);

    const withHelper = await cgroup('with');
    const images = join(base, 'images');
    await mkdir(images);
    const errors: Error[] = [];
    const wb = startWriteBack(helper, images, (e) => errors.push(e));
    await writeInCgroup(withHelper, join(images, 'pages-1.img'), 64);
    // Whatever was not handed on yet is less than one step (1 MiB) per file.
    expect(await dirtyAfter(withHelper, 2 * MIB, 10_000)).toBeLessThanOrEqual(2 * MIB);
    await wb.stop();
    expect(errors).toEqual([]);
    expect(await dirtyBytes(without)).toBeGreaterThan(32 * MIB); // the other dir was not touched
  });

  it('follows no symlink and waits for a dir that does not exist yet; stops at once', async () => {
    const cg = await cgroup('symlink');
    const outside = join(base, 'outside');
    await mkdir(outside);
    const dir = join(base, 'later');
    const errors: Error[] = [];
    const wb = startWriteBack(helper, dir, (e) => errors.push(e));
    await new Promise((r) => setTimeout(r, 50));
    await mkdir(dir);
    await writeInCgroup(cg, join(outside, 'big'), 16);
    await symlink(join(outside, 'big'), join(dir, 'link'));
    await writeFile(join(dir, 'small'), 'x');
    await new Promise((r) => setTimeout(r, 300));
    expect(await dirtyBytes(cg)).toBeGreaterThan(8 * MIB);
    await wb.stop();
    expect(errors).toEqual([]);
  });

  it('refuses a relative dir; an error of the helper is reported, not thrown', async () => {
    const errors: Error[] = [];
    await startWriteBack(helper, 'relative/dir', (e) => errors.push(e)).stop();
    expect(errors.map((e) => e.message)).toEqual([expect.stringMatching(/code 2: usage: aenv-writeback/)]);
    const missing: Error[] = [];
    await startWriteBack(join(base, 'no-such-helper'), base, (e) => missing.push(e)).stop();
    expect(missing.map((e) => e.message)).toEqual([expect.stringMatching(/ENOENT/)]);
  });

  it('cannot be built without a compiler, and says so', async () => {
    await expect(buildWriteBackHelper(join(base, 'native2'), join(base, 'no-gcc'))).rejects.toThrow(
      /cannot build the write-back helper/,
    );
  });
});
