// ImageService against a real Debian docker-registry on loopback (behind a counting proxy), as root:
// formats, platform choice, whiteouts in overlay form (checked with a real overlay mount), ownership shift,
// file capabilities, single-flight downloads, retries, errors, restart, crash leftovers, local transports.

import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpErrorAnswer } from '@aenv/protocol';
import { run } from '../util/exec.js';
import { ImageError } from './errors.js';
import { readXattr } from './special-files.js';
import { startCountingProxy, type CountingProxy } from './testing/counting-proxy.js';
import { FAST_RETRY, metricValue, startHarness, type Harness } from './testing/harness.js';
import {
  buildImage,
  buildIndex,
  writeArchive,
  writeLayout,
  type BuiltImage,
  type BuiltIndex,
} from './testing/oci-builder.js';
import { freePort, pushImage, startRegistry, storedBlobPath, type TestRegistry } from './testing/registry.js';

const SHIFT = 100000;

let reg: TestRegistry;
let proxy: CountingProxy;
let h: Harness;

const single = buildImage({
  layers: [
    {
      entries: [
        { name: 'etc/', type: 'dir', mode: 0o755 },
        { name: 'etc/os-release', content: 'ID=aenvtest\n' },
        { name: 'usr/bin/tool', content: '#!/bin/sh\necho hi\n', mode: 0o755 },
        { name: 'bin', type: 'symlink', linkname: 'usr/bin' },
        { name: 'home/user/', type: 'dir', mode: 0o750, uid: 1000, gid: 1000 },
        { name: 'home/user/.bashrc', content: 'PS1=x\n', uid: 1000, gid: 1000 },
        {
          name: 'usr/bin/ping',
          content: 'ELF',
          mode: 0o755,
          xattrs: {
            // v2 capability: cap_net_raw (bit 13) permitted + effective flag
            'security.capability': Buffer.from([
              0x01, 0, 0, 0x02, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ]),
            'user.note': 'kept',
            'trusted.overlay.redirect': '/etc',
          },
        },
        { name: 'run/initctl', type: 'fifo', mode: 0o600 },
      ],
    },
  ],
  config: {
    Env: ['PATH=/usr/local/bin:/usr/bin:/bin', 'LANG=C.UTF-8'],
    Cmd: ['/bin/bash'],
    Entrypoint: ['/usr/bin/tini', '--'],
    WorkingDir: '/home/user',
    User: 'user',
    ExposedPorts: { '8080/tcp': {} },
    Volumes: { '/data': {} },
    Labels: { 'org.example.role': 'test' },
  },
});

const multi = buildImage({
  layers: [
    {
      entries: [
        { name: 'a/', type: 'dir' },
        { name: 'a/old1', content: 'old1' },
        { name: 'a/old2', content: 'old2' },
        { name: 'removed.txt', content: 'bye' },
        { name: 'keep.txt', content: 'keep' },
        { name: 'gone/', type: 'dir' },
        { name: 'gone/inside', content: 'x' },
      ],
    },
    {
      entries: [
        { name: '.wh.removed.txt', content: '' },
        { name: '.wh.gone', content: '' },
        { name: 'a/', type: 'dir' },
        { name: 'a/.wh..wh..opq', content: '' },
        { name: 'a/new', content: 'new' },
        { name: 'c/f', content: 'shared inode' },
        { name: 'c/h1', type: 'hardlink', linkname: 'c/f' },
      ],
    },
  ],
});

const archImage = (arch: string, variant?: string): BuiltImage =>
  buildImage({
    layers: [{ entries: [{ name: 'arch', content: arch }] }],
    architecture: arch,
    ...(variant ? { variant } : {}),
  });
const index: BuiltIndex = buildIndex([archImage('arm64', 'v8'), archImage('amd64'), archImage('s390x')], {
  withUnknownPlatform: true,
});
const zstdImage = buildImage({
  layers: [{ entries: [{ name: 'z.txt', content: 'zstd layer' }], compression: 'zstd' }],
});
const plainImage = buildImage({
  layers: [{ entries: [{ name: 'p.txt', content: 'plain layer' }], compression: 'none' }],
});
const dockerImage = buildImage({
  docker: true,
  layers: [{ entries: [{ name: 'd.txt', content: 'docker schema2' }] }],
});
const sharedBase = { entries: [{ name: 'base.txt', content: 'shared base layer' }] };
const childA = buildImage({ layers: [sharedBase, { entries: [{ name: 'a.txt', content: 'A' }] }] });
const childB = buildImage({ layers: [sharedBase, { entries: [{ name: 'b.txt', content: 'B' }] }] });
const hostile = buildImage({
  layers: [{ entries: [{ name: '../../../../escape-aenv-test', content: 'x' }] }],
});

function ref(repo: string, tag = 'v1'): string {
  return `${proxy.host}/${repo}:${tag}`;
}

function blobGets(repo: string, digest?: string): number {
  return proxy.count(new RegExp(`^GET /v2/${repo}/blobs/${digest ?? ''}`));
}

async function pullError(p: Promise<unknown>): Promise<ImageError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof ImageError) return e;
    throw e;
  }
  throw new Error('expected the pull to fail');
}

function layerDirCount(): number {
  const root = join(h.rootDir, 'layers');
  return readdirSync(root).reduce((n, m) => n + readdirSync(join(root, m)).length, 0);
}

beforeAll(async () => {
  reg = await startRegistry();
  proxy = await startCountingProxy(reg.url);
  const pushes: [string, BuiltImage | BuiltIndex][] = [
    ['test/single', single],
    ['test/multi', multi],
    ['test/index', index],
    ['test/zstd', zstdImage],
    ['test/plain', plainImage],
    ['test/docker', dockerImage],
    ['test/child-a', childA],
    ['test/child-b', childB],
    ['test/hostile', hostile],
  ];
  for (const [repo, item] of pushes) await pushImage(reg.url, repo, 'v1', item);
  h = await startHarness({
    insecureRegistries: [proxy.host, reg.host],
    resolver: { searchRegistries: [proxy.host] },
  });
});

afterAll(async () => {
  await h?.close();
  await proxy?.stop();
  await reg?.stop();
});

describe('pull from a registry', () => {
  it('pulls a single-platform OCI image: layers, ownership shift, config', async () => {
    const img = await h.service.pull(ref('test/single'));
    expect(img.reference).toBe(ref('test/single'));
    expect(img.manifestDigest).toBe(single.manifest.digest);
    expect(img.configDigest).toBe(single.config.digest);
    expect(img.layers.map((l) => l.diffId)).toEqual(single.layers.map((l) => l.diffId));
    const dir = img.layers[0]!.dir;
    expect(readFileSync(join(dir, 'etc/os-release'), 'utf8')).toBe('ID=aenvtest\n');
    expect(statSync(join(dir, 'etc/os-release')).uid).toBe(SHIFT);
    expect(statSync(join(dir, 'home/user')).uid).toBe(SHIFT + 1000);
    expect(statSync(join(dir, 'home/user')).gid).toBe(SHIFT + 1000);
    expect(statSync(join(dir, 'home/user')).mode & 0o7777).toBe(0o750);
    expect(lstatSync(join(dir, 'bin')).uid).toBe(SHIFT);
    expect(statSync(dir).uid).toBe(SHIFT);
    expect(lstatSync(join(dir, 'run/initctl')).isFIFO()).toBe(true);
    expect(lstatSync(join(dir, 'run/initctl')).uid).toBe(SHIFT);
    expect(img.config).toEqual({
      env: ['PATH=/usr/local/bin:/usr/bin:/bin', 'LANG=C.UTF-8'],
      cmd: ['/bin/bash'],
      entrypoint: ['/usr/bin/tini', '--'],
      workingDir: '/home/user',
      user: 'user',
      exposedPorts: ['8080/tcp'],
      volumes: ['/data'],
      labels: { 'org.example.role': 'test' },
    });
    expect(img.layers[0]!.size).toBeGreaterThan(0);
    // The cache root is private: shifted setuid files must not be reachable by host users.
    expect(statSync(h.rootDir).mode & 0o777).toBe(0o700);
  });

  it('shifts file capabilities to the sandbox root (v3 rootid), keeps user.* and drops trusted.* xattrs', async () => {
    const img = await h.service.pull(ref('test/single'));
    const ping = join(img.layers[0]!.dir, 'usr/bin/ping');
    const cap = await readXattr(ping, 'security.capability');
    expect(cap).toBeDefined();
    expect(cap!.length).toBe(24);
    expect(cap!.readUInt32LE(0)).toBe(0x03000001);
    expect(cap!.readUInt32LE(4)).toBe(1 << 13);
    expect(cap!.readUInt32LE(20)).toBe(SHIFT);
    expect((await readXattr(ping, 'user.note'))?.toString()).toBe('kept');
    expect(await readXattr(ping, 'trusted.overlay.redirect')).toBeUndefined();
  });

  it('converts whiteouts and opaque dirs to overlay form; the layers mount as overlay lowerdirs', async () => {
    const img = await h.service.pull(ref('test/multi'));
    expect(img.layers).toHaveLength(2);
    const top = img.layers[1]!.dir;
    const wh = lstatSync(join(top, 'removed.txt'));
    expect(wh.isCharacterDevice()).toBe(true);
    expect(wh.rdev).toBe(0);
    expect(lstatSync(join(top, 'gone')).isCharacterDevice()).toBe(true);
    expect((await readXattr(join(top, 'a'), 'trusted.overlay.opaque'))?.toString()).toBe('y');
    expect(statSync(join(top, 'c/h1')).ino).toBe(statSync(join(top, 'c/f')).ino);
    expect(existsSync(join(top, '.wh.removed.txt'))).toBe(false);

    const mnt = join(h.dir, 'overlay');
    for (const d of ['upper', 'work', 'merged']) mkdirSync(join(mnt, d), { recursive: true });
    const lower = [...img.layers]
      .reverse()
      .map((l) => l.dir)
      .join(':');
    await run('mount', [
      '-t',
      'overlay',
      'overlay',
      '-o',
      `lowerdir=${lower},upperdir=${mnt}/upper,workdir=${mnt}/work`,
      `${mnt}/merged`,
    ]);
    try {
      const m = join(mnt, 'merged');
      expect(readdirSync(m).sort()).toEqual(['a', 'c', 'keep.txt']);
      expect(readdirSync(join(m, 'a'))).toEqual(['new']);
      expect(readFileSync(join(m, 'c/h1'), 'utf8')).toBe('shared inode');
    } finally {
      await run('umount', [`${mnt}/merged`]);
      rmSync(mnt, { recursive: true, force: true });
    }
  });

  it('picks linux/amd64 from a multi-platform index (attestation entries ignored), or the configured platform', async () => {
    const img = await h.service.pull(ref('test/index'));
    const amd64 = index.images[1]!;
    expect(img.manifestDigest).toBe(amd64.manifest.digest);
    expect(img.platform).toBe('linux/amd64');
    expect(readFileSync(join(img.layers[0]!.dir, 'arch'), 'utf8')).toBe('amd64');

    const arm = await startHarness({
      insecureRegistries: [proxy.host],
      platform: { os: 'linux', architecture: 'arm64', variant: 'v8' },
    });
    try {
      const a = await arm.service.pull(ref('test/index'));
      expect(a.manifestDigest).toBe(index.images[0]!.manifest.digest);
      const riscv = await arm.service.pull(ref('test/single')).catch((e: unknown) => e);
      expect((riscv as ImageError).reason).toBe('UnsupportedImage');
      expect((riscv as ImageError).message).toMatch(/image is for linux\/amd64, this host runs linux\/arm64/);
    } finally {
      await arm.close();
    }
  });

  it('pulls zstd, uncompressed and Docker schema2 images', async () => {
    const z = await h.service.pull(ref('test/zstd'));
    expect(readFileSync(join(z.layers[0]!.dir, 'z.txt'), 'utf8')).toBe('zstd layer');
    const p = await h.service.pull(ref('test/plain'));
    expect(readFileSync(join(p.layers[0]!.dir, 'p.txt'), 'utf8')).toBe('plain layer');
    const d = await h.service.pull(ref('test/docker'));
    expect(d.manifestDigest).toBe(dockerImage.manifest.digest);
    expect(readFileSync(join(d.layers[0]!.dir, 'd.txt'), 'utf8')).toBe('docker schema2');
  });

  it('resolves short names through search_registries', async () => {
    const img = await h.service.pull('test/single:v1');
    expect(img.reference).toBe(ref('test/single'));
    expect(h.service.get('test/single:v1')?.manifestDigest).toBe(single.manifest.digest);
  });

  it('pulls by digest, and tag+digest', async () => {
    const byDigest = await h.service.pull(`${proxy.host}/test/single@${single.manifest.digest}`);
    expect(byDigest.manifestDigest).toBe(single.manifest.digest);
    const both = await h.service.pull(`${proxy.host}/test/single:v1@${single.manifest.digest}`, {
      refresh: true,
    });
    expect(both.manifestDigest).toBe(single.manifest.digest);
    expect(h.service.get(single.manifest.digest)?.layers[0]!.dir).toBe(byDigest.layers[0]!.dir);

    // Pinned to an index digest: the platform manifest is remembered, so the second pull needs no registry.
    const pinned = `${proxy.host}/test/index@${index.index.digest}`;
    const first = await h.service.pull(pinned);
    expect(first.manifestDigest).toBe(index.images[1]!.manifest.digest);
    proxy.reset();
    await h.service.pull(pinned);
    expect(proxy.count(/./)).toBe(0);
  });

  it('rejects a hostile layer and leaves nothing behind', async () => {
    const before = layerDirCount();
    const e = await pullError(h.service.pull(ref('test/hostile')));
    expect(e.reason).toBe('UnsupportedImage');
    expect(e.userError).toBe(true);
    expect(e.message).toMatch(/escapes the layer/);
    expect(existsSync('/escape-aenv-test')).toBe(false);
    expect(layerDirCount()).toBe(before);
    expect(readdirSync(join(h.rootDir, 'tmp'))).toEqual([]);
    expect(h.service.get(ref('test/hostile'))).toBeUndefined();
  });
});

describe('downloads', () => {
  it('two concurrent pulls of the same image download each blob once', async () => {
    const fresh = await startHarness({ insecureRegistries: [proxy.host] });
    try {
      proxy.reset();
      const [a, b] = await Promise.all([
        fresh.service.pull(ref('test/multi')),
        fresh.service.pull(ref('test/multi')),
      ]);
      expect(a.layers.map((l) => l.dir)).toEqual(b.layers.map((l) => l.dir));
      for (const l of multi.layers) expect(blobGets('test/multi', l.digest)).toBe(1);
      expect(blobGets('test/multi', multi.config.digest)).toBe(1);
    } finally {
      await fresh.close();
    }
  });

  it('two images sharing a base layer, pulled at once, download and unpack it once', async () => {
    const fresh = await startHarness({ insecureRegistries: [proxy.host] });
    try {
      proxy.reset();
      const [a, b] = await Promise.all([
        fresh.service.pull(ref('test/child-a')),
        fresh.service.pull(ref('test/child-b')),
      ]);
      expect(a.layers[0]!.dir).toBe(b.layers[0]!.dir);
      const base = childA.layers[0]!.digest;
      expect(blobGets('test/child-a', base) + blobGets('test/child-b', base)).toBe(1);
      expect(await metricValue(fresh.metrics, 'aenv_image_cache_misses_total', { kind: 'layer' })).toBe(3);
    } finally {
      await fresh.close();
    }
  });

  it('retries transient registry errors and interrupted bodies', async () => {
    const fresh = await startHarness({ insecureRegistries: [proxy.host] });
    try {
      proxy.reset();
      const layer = single.layers[0]!.digest;
      proxy.inject({
        match: new RegExp(`GET /v2/test/single/blobs/${layer}`),
        times: 1,
        kind: { status: 503 },
      });
      proxy.inject({
        match: new RegExp(`GET /v2/test/single/blobs/${layer}`),
        times: 1,
        kind: 'reset-mid-body',
      });
      proxy.inject({ match: /GET \/v2\/test\/single\/manifests\//, times: 1, kind: { status: 502 } });
      const img = await fresh.service.pull(ref('test/single'));
      expect(readFileSync(join(img.layers[0]!.dir, 'etc/os-release'), 'utf8')).toBe('ID=aenvtest\n');
      expect(blobGets('test/single', layer)).toBe(3);
      expect(readdirSync(join(fresh.rootDir, 'tmp'))).toEqual([]);
    } finally {
      await fresh.close();
    }
  });

  it('gives up after the retries with a 5xx-class error', async () => {
    const fresh = await startHarness({ insecureRegistries: [proxy.host] });
    try {
      proxy.reset();
      proxy.inject({
        match: /GET \/v2\/test\/zstd\/manifests\//,
        times: FAST_RETRY.retries + 1,
        kind: { status: 503 },
      });
      const e = await pullError(fresh.service.pull(ref('test/zstd')));
      expect(e.reason).toBe('Unreachable');
      expect(httpErrorAnswer(e.kind).status).toBe(503);
      expect(e.userError).toBe(false);
    } finally {
      await fresh.close();
    }
  });

  it('an aborted pull leaves no temporary directory and no image', async () => {
    const fresh = await startHarness({ insecureRegistries: [proxy.host] });
    try {
      const ac = new AbortController();
      const p = fresh.service.pull(ref('test/multi'), {
        signal: ac.signal,
        onProgress: (e) => {
          if (e.type === 'layer-start') ac.abort(new Error('stop'));
        },
      });
      await expect(p).rejects.toThrow();
      // The shared download ends asynchronously; wait for it to settle (bounded).
      for (let i = 0; i < 200 && readdirSync(join(fresh.rootDir, 'tmp')).length > 0; i++)
        await new Promise((r) => setTimeout(r, 10));
      expect(readdirSync(join(fresh.rootDir, 'tmp'))).toEqual([]);
      expect(fresh.service.get(ref('test/multi'))).toBeUndefined();
      expect(fresh.service.listLeases()).toEqual([]);
    } finally {
      await fresh.close();
    }
  });
});

describe('errors', () => {
  it('unknown tag and unknown repository → NotFound (user error)', async () => {
    for (const r of [ref('test/single', 'nope'), ref('test/does-not-exist')]) {
      const e = await pullError(h.service.pull(r));
      expect(e.reason).toBe('NotFound');
      expect(httpErrorAnswer(e.kind).status).toBe(404);
      expect(e.userError).toBe(true);
      // The registry's error body goes to the log; messages (which reach API callers) never carry it.
      expect(e.message).toMatch(/not found$/);
      expect(e.message).not.toMatch(/MANIFEST_UNKNOWN|NAME_UNKNOWN/);
    }
    expect(JSON.stringify(h.log.lines)).toMatch(/MANIFEST_UNKNOWN|NAME_UNKNOWN/);
  });

  it('a short name found nowhere lists the registries tried', async () => {
    const port = await freePort();
    const s = await startHarness({
      insecureRegistries: [proxy.host, `127.0.0.1:${port}`],
      resolver: {
        searchRegistries: [`127.0.0.1:${port}`, proxy.host, 'ghcr.io'],
        allowedRegistries: [`127.0.0.1:${port}`, proxy.host],
      },
    });
    try {
      const e = await pullError(s.service.pull('test/nothing-here:v1'));
      expect(e.reason).toBe('NotFound');
      expect(e.message).toContain(`127.0.0.1:${port} (Unreachable`);
      expect(e.message).toContain(`${proxy.host} (NotFound`);
      expect(e.message).toContain('not allowed by allowed_registries: ghcr.io');
      // The first registry is down, the second has the image.
      const img = await s.service.pull('test/single:v1');
      expect(img.reference).toBe(ref('test/single'));
      // Once cached, the later candidate is served without asking the earlier (down) registry again.
      const triedBefore = s.log.lines.filter((l) => l.msg?.includes('trying the next registry')).length;
      proxy.reset();
      await s.service.pull('test/single:v1');
      expect(s.log.lines.filter((l) => l.msg?.includes('trying the next registry')).length).toBe(triedBefore);
      expect(proxy.count(/./)).toBe(0);
    } finally {
      await s.close();
    }
  });

  it('a closed port → Unreachable', async () => {
    const port = await freePort();
    const e = await pullError(h.service.pull(`127.0.0.1:${port}/x/y:1`));
    expect(e.reason).toBe('Unreachable');
    expect(e.message).toMatch(/ECONNREFUSED/);
  });

  it('plain HTTP is used only for insecure registries', async () => {
    const s = await startHarness({ insecureRegistries: [] });
    try {
      const e = await pullError(s.service.pull(ref('test/single')));
      expect(e.reason).toBe('Unreachable');
      expect(e.message).toMatch(/https:\/\//);
      expect(e.message).toMatch(/insecure_registries/);
    } finally {
      await s.close();
    }
  });

  it('a tampered layer blob → DigestMismatch; nothing cached', async () => {
    const img = buildImage({
      layers: [{ entries: [{ name: 'tamper.txt', content: 'original content here' }] }],
    });
    await pushImage(reg.url, 'test/tamper', 'v1', img);
    const path = storedBlobPath(reg, img.layers[0]!.digest);
    const data = readFileSync(path);
    data[data.length - 5]! ^= 0xff;
    writeFileSync(path, data);
    const before = layerDirCount();
    const e = await pullError(h.service.pull(ref('test/tamper')));
    expect(e.reason).toBe('DigestMismatch');
    expect(e.userError).toBe(false);
    expect(e.message).toContain(img.layers[0]!.digest);
    expect(layerDirCount()).toBe(before);
    expect(readdirSync(join(h.rootDir, 'tmp'))).toEqual([]);
    expect(h.service.get(ref('test/tamper'))).toBeUndefined();
  });

  it('a truncated layer blob → size mismatch', async () => {
    const img = buildImage({ layers: [{ entries: [{ name: 'short.txt', content: 'x'.repeat(4000) }] }] });
    await pushImage(reg.url, 'test/short', 'v1', img);
    const path = storedBlobPath(reg, img.layers[0]!.digest);
    truncateSync(path, statSync(path).size - 10);
    const e = await pullError(h.service.pull(ref('test/short')));
    expect(['DigestMismatch', 'Unreachable']).toContain(e.reason);
    expect(e.message).toMatch(/size mismatch|interrupted|ECONNRESET|terminated|other side closed/);
    expect(h.service.get(ref('test/short'))).toBeUndefined();
  });

  it('a tampered config blob → DigestMismatch', async () => {
    const img = buildImage({
      layers: [{ entries: [{ name: 'cfg.txt', content: 'c' }] }],
      config: { Env: ['A=1'] },
    });
    await pushImage(reg.url, 'test/tamper-config', 'v1', img);
    const path = storedBlobPath(reg, img.config.digest);
    writeFileSync(path, readFileSync(path).toString().replace('A=1', 'A=2'));
    const e = await pullError(h.service.pull(ref('test/tamper-config')));
    expect(e.reason).toBe('DigestMismatch');
    expect(e.message).toContain(img.config.digest);
  });
});

describe('cache state', () => {
  it('survives a restart: the same pull is a cache hit without registry traffic', async () => {
    const s = await startHarness({ insecureRegistries: [proxy.host] });
    try {
      const first = await s.service.pull(ref('test/multi'));
      proxy.reset();
      const svc = await s.restart();
      const again = await svc.pull(ref('test/multi'));
      expect(again.layers.map((l) => l.dir)).toEqual(first.layers.map((l) => l.dir));
      expect(proxy.count(/./)).toBe(0);
      expect(await metricValue(s.metrics, 'aenv_image_cache_hits_total', { kind: 'image' })).toBe(1);
      // refresh re-checks the tag (manifest only; layers are hits).
      await svc.pull(ref('test/multi'), { refresh: true });
      expect(proxy.count(/manifests/)).toBe(1);
      expect(proxy.count(/blobs/)).toBe(0);
    } finally {
      await s.close();
    }
  });

  it('cleans crash leftovers at startup and redoes an interrupted unpack', async () => {
    const s = await startHarness({ insecureRegistries: [proxy.host] });
    try {
      const img = await s.service.pull(ref('test/multi'));
      const [bottom, top] = img.layers;
      // A crash mid-unpack (tmp dir), mid-delete (trash dir), after rename but before the metadata write
      // (orphan dir), and a layer deleted behind our back (row without dir).
      mkdirSync(join(s.rootDir, 'tmp', 'abc.1234'), { recursive: true });
      writeFileSync(join(s.rootDir, 'tmp', 'abc.1234', 'half'), 'x');
      mkdirSync(join(s.rootDir, 'trash', 'zzz'), { recursive: true });
      const orphan = join(s.rootDir, 'layers', 'v1-100000-65536', 'f'.repeat(64));
      mkdirSync(orphan);
      rmSync(top!.dir, { recursive: true });
      proxy.reset();
      const svc = await s.restart();
      expect(readdirSync(join(s.rootDir, 'tmp'))).toEqual([]);
      expect(readdirSync(join(s.rootDir, 'trash'))).toEqual([]);
      expect(existsSync(orphan)).toBe(false);
      expect(existsSync(bottom!.dir)).toBe(true);
      expect(svc.get(ref('test/multi'))).toBeUndefined();
      const again = await svc.pull(ref('test/multi'));
      expect(existsSync(join(again.layers[1]!.dir, 'a/new'))).toBe(true);
      expect(blobGets('test/multi', multi.layers[1]!.digest)).toBe(1);
      expect(blobGets('test/multi', multi.layers[0]!.digest)).toBe(0);
    } finally {
      await s.close();
    }
  });
});

describe('local transports', () => {
  it('oci: layout with tags; oci-archive:', async () => {
    const layout = join(h.dir, 'layout');
    writeLayout(layout, [
      { tag: 'latest', item: single },
      { tag: 'multi', item: index },
    ]);
    const img = await h.service.pull(`oci:${layout}:latest`);
    expect(img.manifestDigest).toBe(single.manifest.digest);
    expect(img.reference).toBe(`oci:${layout}:latest`);
    const idx = await h.service.pull(`oci:${layout}:multi`);
    expect(idx.manifestDigest).toBe(index.images[1]!.manifest.digest);

    const missing = await pullError(h.service.pull(`oci:${layout}:nope`));
    expect(missing.reason).toBe('NotFound');
    expect(missing.message).toContain('tags: latest, multi');
    const ambiguous = await pullError(h.service.pull(`oci:${layout}`));
    expect(ambiguous.reason).toBe('InvalidReference');
    const notLayout = await pullError(h.service.pull(`oci:${h.dir}/nowhere`));
    expect(notLayout.reason).toBe('NotFound');

    const archive = join(h.dir, 'image.tar');
    writeArchive(layout, archive);
    const fromArchive = await h.service.pull(`oci-archive:${archive}:latest`);
    expect(fromArchive.manifestDigest).toBe(single.manifest.digest);
    expect(fromArchive.layers[0]!.dir).toBe(img.layers[0]!.dir);
    expect(readdirSync(join(h.rootDir, 'tmp'))).toEqual([]);
    expect(h.service.get(`oci-archive:${archive}:latest`)?.manifestDigest).toBe(single.manifest.digest);
  });
});
