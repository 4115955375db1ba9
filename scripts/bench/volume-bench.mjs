// Volumes (docs/volumes.md) against the sandbox's own disk and the raw host filesystem, in one run: sequential
// write/read (dd, O_DIRECT, fsync'ed) and random 4 KiB O_DIRECT write/read (python3), each in a sandbox on a
// mounted volume, in the same sandbox on its own disk (overlay upper), and on the host (the volume's directory
// and $TMPDIR); and what mounting a volume adds to a create (median of sequential creates with and without).
// Run under the shared lock:  flock /tmp/aenv-roottests.lock node scripts/bench/volume-bench.mjs [--mb 256] [--creates 5]
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Sandbox, Volume } from 'e2b';
import { removeNode, startNode } from './lib/nodes.mjs';

const NODE = 'bvol';
const { values } = parseArgs({
  options: { mb: { type: 'string', default: '256' }, creates: { type: 'string', default: '5' } },
});
const MB = Number(values.mb);
const CREATES = Number(values.creates);

/** One shell script, run in a sandbox or on the host: prints one JSON line of MB/s and IOPS for `dir`. */
const script = (dir) => `set -e
d=${dir}/aenv-vol-bench; rm -rf "$d"; mkdir -p "$d"
t() { date +%s.%N; }
a=$(t); dd if=/dev/zero of="$d/seq" bs=1M count=${MB} oflag=direct conv=fsync status=none; b=$(t)
dd if="$d/seq" of=/dev/null bs=1M iflag=direct status=none; c=$(t)
python3 - "$d" ${MB} "$a" "$b" "$c" <<'PY'
import json, mmap, os, random, sys, time
d, mb, a, b, c = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:6])
path, n, span = os.path.join(d, 'rand'), 4096, 64 * 1024 * 1024
buf = mmap.mmap(-1, 4096); buf.write(os.urandom(4096))
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600); os.ftruncate(fd, span)
offs = [random.randrange(span // 4096) * 4096 for _ in range(n)]
t0 = time.time()
for o in offs: os.pwritev(fd, [buf], o)
os.fsync(fd); t1 = time.time()
for o in offs: os.preadv(fd, [buf], o)
t2 = time.time(); os.close(fd)
print(json.dumps({'seqWriteMBps': round(mb / (b - a)), 'seqReadMBps': round(mb / (c - b)),
  'randWriteIops': round(n / (t1 - t0)), 'randReadIops': round(n / (t2 - t1))}))
PY
rm -rf "$d"`;

const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];

await removeNode(NODE);
const node = await startNode(NODE);
const { server, sdk } = node;
const hostDir = mkdtempSync(join(process.env.TMPDIR ?? '/var/tmp', 'aenv-vol-bench-'));
try {
  const vol = await Volume.create('bench', sdk);
  const inSandbox = async (sbx, dir) =>
    JSON.parse(
      (
        await sbx.commands.run(`bash -c '${script(dir).replaceAll("'", "'\\''")}'`, {
          user: 'root',
          timeoutMs: 600_000,
        })
      ).stdout,
    );
  const onHost = (dir) => JSON.parse(execFileSync('bash', ['-c', script(dir)], { encoding: 'utf8' }));

  const sbx = await Sandbox.create({ ...sdk, volumeMounts: { '/vol': vol }, timeoutMs: 900_000 });
  const volumeDir = join(server.home, 'sandboxes', '.volumes', vol.volumeId);
  const io = {
    volumeInSandbox: await inSandbox(sbx, '/vol'),
    sandboxOwnDisk: await inSandbox(sbx, '/var/tmp'),
    volumeDirOnHost: onHost(volumeDir),
    hostTmp: {
      dir: hostDir,
      fs: execFileSync('stat', ['-f', '-c', '%T', hostDir], { encoding: 'utf8' }).trim(),
      ...onHost(hostDir),
    },
  };
  await sbx.kill();

  const createMs = async (opts) => {
    const ms = [];
    for (let i = 0; i < CREATES; i++) {
      const t = performance.now();
      const s = await Sandbox.create({ ...sdk, ...opts, timeoutMs: 120_000 });
      ms.push(performance.now() - t);
      await s.kill();
    }
    return Math.round(median(ms));
  };
  const plain = await createMs({});
  const withVolume = await createMs({ volumeMounts: { '/vol': vol } });
  console.log(
    JSON.stringify(
      { mb: MB, io, createMedianMs: { plain, withVolume, mountCost: withVolume - plain }, creates: CREATES },
      null,
      2,
    ),
  );
  await Volume.destroy(vol.volumeId, sdk);
} finally {
  rmSync(hostDir, { recursive: true, force: true });
  await server.shutdown();
  await removeNode(NODE);
}
