// What a disk capture commits, key for key, into a real posix repository: launches (launch.ts), the catalog and
// records of earlier versions all read this format (capture-format.ts), so it must not drift.
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { containerRecordCodec } from '../runtime/drivers/container/record-codec.js';
import { createSnapshotRepository, type SnapshotRepository } from '../snapshot/index.js';
import { publishDisk } from './capture.js';
import { captureNetwork, DISK_MEDIA_TYPE } from './capture-format.js';
import type { BackendContext } from './context.js';
import { BackendRecordCodec, RecordStateError } from './record-state.js';
import type { SandboxNetworkSettings } from '../orchestrator/types.js';
import { parseNetworkPolicy } from '../network/policy.js';

const logger = pino({ level: 'silent' });
const context = {
  envVars: { A: '1' },
  workdir: '/app',
  user: 'user',
  exposedPorts: [],
  volumes: [],
  labels: {},
};

describe('publishDisk', () => {
  let dir: string;
  let repository: SnapshotRepository;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-capture-'));
    repository = createSnapshotRepository({
      backend: 'posix_fs',
      posixFs: { snapshotStore: join(dir, 'store') },
      localCachePath: join(dir, 'cache'),
      cacheMaxSizeGb: 1,
      compression: { enabled: false, level: 3 },
      signing: { secret: 'capture-test' },
      logger,
    });
    await repository.reconcile();
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  const contextOf = () =>
    ({
      o: {
        runtime: { virtualizationMode: 'container', diskFilesDir: (d: string) => join(d, 'files') },
        repository,
      },
      records: new BackendRecordCodec(containerRecordCodec),
    }) as unknown as BackendContext;

  /** Publishes a one-file disk as a snapshot of sandbox sb-1 whose record's network is `network`. */
  const publishSnapshot = async (network?: SandboxNetworkSettings) => {
    const disk = join(dir, 'disk');
    await mkdir(join(disk, 'files'), { recursive: true });
    await writeFile(join(disk, 'files', 'hello.txt'), 'hello\n');
    const rec = await repository.create({
      source: { kind: 'sandbox', sourceSandboxId: 'sb-1' },
      resources: { cpuCount: 1, memoryMB: 512, diskSizeMB: 1024 },
    });
    await publishDisk(
      contextOf(),
      {
        containerId: 'sb-1',
        sourceSandboxId: 'sb-1',
        secure: true,
        state: {
          imageRef: 'oci:/images/base:latest',
          manifestDigest: 'sha256:aa',
          rootfs: { layers: ['/layers/1'] },
          toolsVersion: 'tools-7',
          envdEnv: {},
        },
        ...(network ? { network } : {}),
      },
      { recordId: rec.id, context },
      disk,
      dir,
      { envd: 'envd-3', tools: 'tools-7' },
    );
    return rec.id;
  };

  // What a sandbox record holds after a create with every network field (the policy as the API parsed it).
  const NETWORK: SandboxNetworkSettings = {
    allowPublicTraffic: false,
    httpsPorts: [8443],
    maskRequestHost: '${PORT}-app.example.com',
    ...parseNetworkPolicy({
      allowOut: ['api.example.com', '*.wild.example.com', '198.51.100.7'],
      denyOut: ['0.0.0.0/0'],
      allowInternetAccess: false,
      rules: {
        'api.example.com': [{ transform: { headers: { Authorization: 'Bearer ${e2b.secrets.api-key}' } } }],
      },
      egressProxy: { address: 'socks.example.com:1080', username: 'u', password: 'p4ss' },
    }),
  };

  it('records the network settings of the sandbox it captures; a launch reads back the same settings', async () => {
    const id = await publishSnapshot(NETWORK);
    const committed = (await repository.get(id)).committed!;
    expect(captureNetwork(id, committed.extra)).toEqual(NETWORK);
    // A JSON round trip of the record (what every other node reads from the shared repository) keeps them.
    expect(captureNetwork(id, JSON.parse(JSON.stringify(committed.extra)))).toEqual(NETWORK);
  });

  it('a capture without network settings (a template, or a snapshot taken before they were recorded) has none', async () => {
    const id = await publishSnapshot();
    const committed = (await repository.get(id)).committed!;
    expect(committed.extra).not.toHaveProperty('network');
    expect(captureNetwork(id, committed.extra)).toBeUndefined();
    expect(captureNetwork(id, undefined)).toBeUndefined();
  });

  it('the recorded network is part of the signed commit marker: a changed one is refused', async () => {
    const id = await publishSnapshot(NETWORK);
    const marker = join(dir, 'store', 'repository', 'snapshots', id, 'commit');
    const doc = JSON.parse(await readFile(marker, 'utf8'));
    expect(doc.committed.extra.network.denyOut).toEqual(['0.0.0.0/0']);
    // Whoever can write the store but lacks the signing secret opens the deny-all.
    doc.committed.extra.network.denyOut = [];
    await writeFile(marker, JSON.stringify(doc, null, 2));
    await expect(repository.get(id)).rejects.toMatchObject({
      reason: 'IntegrityMismatch',
      message: expect.stringMatching(/does not match its signature/),
    });
  });

  it('a recorded network that does not decode is an error naming the snapshot, never a looser launch', () => {
    const cases: [unknown, RegExp][] = [
      [{ ...NETWORK, allowOut: 'api.example.com' }, /\(allowOut\)/],
      [{ ...NETWORK, allowInternetAccess: 'no' }, /\(allowInternetAccess\)/],
      [{ ...NETWORK, httpsPorts: [0] }, /\(httpsPorts\.0\)/],
      [{ ...NETWORK, allowOut: ['a..b'] }, /invalid allowOut domain entry "a\.\.b"/],
      [{ ...NETWORK, rules: { 'api.example.com': [{ transform: { headers: { Host: 'x' } } }] } }, /Host/],
      [{ ...NETWORK, egressProxy: { address: 'socks.example.com' } }, /has no port/],
      ['allow everything', /\(\(root\)\)/],
    ];
    for (const [network, message] of cases) {
      const read = () => captureNetwork('snap-1', { network });
      expect(read).toThrow(RecordStateError);
      expect(read).toThrow(/^snapshot snap-1: its recorded network is invalid/);
      expect(read).toThrow(message);
    }
    // Credentials are never in the message.
    const damaged = { ...NETWORK, egressProxy: { address: 'x', username: 'u', password: 'p4ss' } };
    expect(() => captureNetwork('snap-1', { network: damaged })).toThrow(/^(?!.*p4ss)/s);
  });

  it('commits the disk with the capture record of its source, in the stored key order', async () => {
    const ctx = {
      o: {
        runtime: { virtualizationMode: 'container', diskFilesDir: (d: string) => join(d, 'files') },
        repository,
      },
      records: new BackendRecordCodec(containerRecordCodec),
    } as unknown as BackendContext;
    const disk = join(dir, 'disk');
    await mkdir(join(disk, 'files'), { recursive: true });
    await writeFile(join(disk, 'files', 'hello.txt'), 'hello\n');
    const rec = await repository.create({
      source: { kind: 'template', build: { status: 'building', startedAt: new Date().toISOString() } },
      resources: { cpuCount: 1, memoryMB: 512, diskSizeMB: 1024 },
    });
    await publishDisk(
      ctx,
      {
        containerId: 'tb-1',
        sourceSandboxId: 'tb-1',
        secure: false,
        state: {
          imageRef: 'oci:/images/base:latest',
          manifestDigest: 'sha256:aa',
          rootfs: { layers: ['/layers/1', '/layers/2'] },
          toolsVersion: 'tools-7',
          envdEnv: { PATH: '/usr/bin', ENVD_PORT: '49983', AENV_INIT_LOG: '/run/agentenv/envd.log' },
        },
      },
      { recordId: rec.id, context, startup: { startCmd: 'serve', readyCmd: 'true' } },
      disk,
      dir,
      { envd: 'envd-3', tools: 'tools-7' },
    );
    const committed = (await repository.get(rec.id)).committed!;
    expect(JSON.stringify(committed.extra)).toBe(
      JSON.stringify({
        sourceSandboxId: 'tb-1',
        sourceSecure: false,
        toolsVersion: 'tools-7',
        envdEnv: { PATH: '/usr/bin', ENVD_PORT: '49983', AENV_INIT_LOG: '/run/agentenv/envd.log' },
        ...containerRecordCodec.encode({ layers: ['/layers/1', '/layers/2'] }),
      }),
    );
    expect(committed.runtimeVersions).toEqual({ envd: 'envd-3', tools: 'tools-7' });
    expect(committed.virtualizationMode).toBe('container');
    expect(committed.baseImage).toEqual({
      reference: 'oci:/images/base:latest',
      manifestDigest: 'sha256:aa',
    });
    expect(committed.startup).toEqual({ startCmd: 'serve', readyCmd: 'true', context });
    expect(committed.artifacts).toEqual({});
    expect(committed.layers.map((l) => l.mediaType)).toEqual([DISK_MEDIA_TYPE]);
  });
});
