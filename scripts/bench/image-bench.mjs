#!/usr/bin/env node
// Image pull benchmark (root): ImageService pull + unpack of an image from a local docker-registry on
// 127.0.0.1, cold (empty cache) and warm (cached, with and without a tag re-check), next to
// `skopeo copy docker://… oci:…` + `umoci unpack --uid-map/--gid-map` (the same ownership shift) of the same
// image, interleaved in the same run. Prints n / min / median / p95 in ms and the cold ratio.
//
//   node scripts/bench/image-bench.mjs [--n 5] [--image /var/cache/aenv/images/base:latest] [--json]
//
// Without --image it uses the base image when it has been built (scripts/build-base-image.sh), otherwise a
// synthetic one-layer image made from host directories (python3, perl, zoneinfo, /etc, docs). All traffic
// stays on loopback; everything it creates lives under a temporary directory removed at the end.

import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile, readFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { gzipSync } from 'node:zlib';
import { register } from 'tsx/esm/api';

register();
const { startRegistry } = await import('../../packages/node/src/image/testing/registry.ts');
const { startHarness } = await import('../../packages/node/src/image/testing/harness.ts');

const args = process.argv.slice(2);
const argValue = (name) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const N = Number(argValue('--n') ?? 5) || 5;
const asJson = args.includes('--json');
const SHIFT = 100000;
const RANGE = 65536;

function sh(cmd, argv) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    const out = [];
    let err = '';
    child.stdout.on('data', (b) => out.push(b));
    child.stderr.on('data', (b) => (err += b));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0
        ? resolve(Buffer.concat(out))
        : reject(new Error(`${cmd} ${argv.join(' ')}: ${err.slice(-2000)}`)),
    );
  });
}

function summary(samples) {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)];
  const r = (x) => Math.round(x * 10) / 10;
  return { n: s.length, min: r(s[0]), median: r(at(0.5)), p95: r(at(0.95)) };
}

async function timeIt(fn) {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

const sha256 = (b) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

/** One-layer OCI layout from host directories (GNU tar → gzip), tag "latest". */
async function syntheticImage(dir) {
  const sources = [
    'usr/lib/python3.11',
    'usr/share/perl',
    'usr/share/zoneinfo',
    'etc',
    'usr/share/doc',
  ].filter((p) => existsSync(`/${p}`));
  const tar = await sh('tar', [
    '-C',
    '/',
    '--warning=no-file-changed',
    '--ignore-failed-read',
    '-cf',
    '-',
    ...sources,
  ]);
  const layer = gzipSync(tar, { level: 6 });
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: { Env: ['PATH=/usr/bin:/bin'] },
      rootfs: { type: 'layers', diff_ids: [sha256(tar)] },
    }),
  );
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: {
        mediaType: 'application/vnd.oci.image.config.v1+json',
        digest: sha256(config),
        size: config.length,
      },
      layers: [
        {
          mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
          digest: sha256(layer),
          size: layer.length,
        },
      ],
    }),
  );
  await mkdir(join(dir, 'blobs', 'sha256'), { recursive: true });
  for (const b of [layer, config, manifest])
    await writeFile(join(dir, 'blobs', 'sha256', sha256(b).slice(7)), b);
  await writeFile(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  await writeFile(
    join(dir, 'index.json'),
    JSON.stringify({
      schemaVersion: 2,
      manifests: [
        {
          mediaType: 'application/vnd.oci.image.manifest.v1+json',
          digest: sha256(manifest),
          size: manifest.length,
          annotations: { 'org.opencontainers.image.ref.name': 'latest' },
        },
      ],
    }),
  );
  return {
    ref: `${dir}:latest`,
    description: `synthetic: /${sources.join(', /')} (${(tar.length / 1e6).toFixed(0)} MB tar, ${(layer.length / 1e6).toFixed(0)} MB gzip)`,
  };
}

const scratch = await mkdtemp(join(tmpdir(), 'aenv-image-bench-'));
let registry;
try {
  let image;
  const given = argValue('--image');
  if (given) image = { ref: given, description: given };
  else if (existsSync('/var/cache/aenv/images/base/index.json')) {
    image = {
      ref: '/var/cache/aenv/images/base:latest',
      description: 'base (/var/cache/aenv/images/base:latest)',
    };
  } else image = await syntheticImage(join(scratch, 'synthetic'));

  registry = await startRegistry();
  const remote = `${registry.host}/bench/image:latest`;
  await sh('skopeo', [
    'copy',
    '--quiet',
    '--dest-tls-verify=false',
    `oci:${image.ref}`,
    `docker://${remote}`,
  ]);
  const index = JSON.parse(await readFile(join(image.ref.split(':')[0], 'index.json'), 'utf8'));
  const layerInfo = index.manifests.length;

  /** @type {Record<string, number[]>} */
  const samples = {
    aenvCold: [],
    aenvColdNoSync: [],
    aenvWarm: [],
    aenvWarmRefresh: [],
    skopeoUmoci: [],
    skopeo: [],
    umoci: [],
  };
  let layerCount = 0;
  for (let i = 0; i < N; i++) {
    // aenv, cold, with the default per-layer syncfs before commit
    for (const sync of [true, false]) {
      const h = await startHarness({
        insecureRegistries: [registry.host],
        syncLayers: sync,
        uidShift: SHIFT,
        uidRangeSize: RANGE,
      });
      try {
        /** @type {{ layers: unknown[] } | undefined} */
        let img;
        const cold = await timeIt(async () => {
          img = await h.service.pull(remote);
        });
        layerCount = img?.layers.length ?? 0;
        (sync ? samples.aenvCold : samples.aenvColdNoSync).push(cold);
        if (sync) {
          samples.aenvWarm.push(await timeIt(() => h.service.pull(remote)));
          samples.aenvWarmRefresh.push(await timeIt(() => h.service.pull(remote, { refresh: true })));
        }
      } finally {
        await h.close();
      }
    }
    // skopeo copy + umoci unpack of the same image, with the same uid/gid shift
    const run = join(scratch, `umoci-${i}`);
    await mkdir(run);
    const t1 = await timeIt(() =>
      sh('skopeo', [
        'copy',
        '--quiet',
        '--src-tls-verify=false',
        `docker://${remote}`,
        `oci:${run}/layout:latest`,
      ]),
    );
    const t2 = await timeIt(() =>
      sh('umoci', [
        'unpack',
        `--uid-map=0:${SHIFT}:${RANGE}`,
        `--gid-map=0:${SHIFT}:${RANGE}`,
        '--image',
        `${run}/layout:latest`,
        `${run}/bundle`,
      ]),
    );
    samples.skopeo.push(t1);
    samples.umoci.push(t2);
    samples.skopeoUmoci.push(t1 + t2);
    await rm(run, { recursive: true, force: true });
  }

  const results = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, summary(v)]));
  const ratio = Math.round((results.aenvCold.median / results.skopeoUmoci.median) * 100) / 100;
  const ratioNoSync = Math.round((results.aenvColdNoSync.median / results.skopeoUmoci.median) * 100) / 100;
  if (asJson) {
    console.log(
      JSON.stringify(
        { image: image.description, layers: layerCount, manifests: layerInfo, results, ratio, ratioNoSync },
        null,
        2,
      ),
    );
  } else {
    console.log(`image: ${image.description}; ${layerCount} layer(s); n=${N}; ms`);
    /** @type {[string, { min: number, median: number, p95: number }][]} */
    const rows = [
      ['aenv pull, cold (syncfs per layer)', results.aenvCold],
      ['aenv pull, cold (no syncfs)', results.aenvColdNoSync],
      ['aenv pull, warm (cached tag)', results.aenvWarm],
      ['aenv pull, warm (refresh: manifest check)', results.aenvWarmRefresh],
      ['skopeo copy + umoci unpack', results.skopeoUmoci],
      ['  skopeo copy docker:// → oci:', results.skopeo],
      ['  umoci unpack (uid/gid map)', results.umoci],
    ];
    for (const [name, s] of rows) {
      console.log(
        `${name.padEnd(44)} min ${String(s.min).padStart(8)}  median ${String(s.median).padStart(8)}  p95 ${String(s.p95).padStart(8)}`,
      );
    }
    console.log(`cold ratio aenv / (skopeo + umoci), medians: ${ratio} (no syncfs: ${ratioNoSync})`);
  }
} finally {
  await registry?.stop();
  await rm(scratch, { recursive: true, force: true });
}
