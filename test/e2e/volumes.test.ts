// Persistent volumes through the e2b SDK (docs/volumes.md): E2B's volumes API, `volumeMounts` shared by several
// sandboxes at once, across pause (to disk) and resume, fork and kill; the hostile requests that must create
// nothing. One server for the file.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, Volume, VolumeError } from 'e2b';
import { startServer, useSdk, type TestServer } from './harness.js';

const MOUNT = '/mnt/shared';

describe('volumes through the e2b SDK', () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startServer({
      name: 'vols',
      toml: [
        '[orchestrator]',
        // Pauses go to disk: resume is a CRIU restore, which must mount the volume again.
        'resident_pause_grace_secs = 0',
        '[volume]',
        'max_volume_count = 2',
        'max_size_mb = 64',
        '',
      ].join('\n'),
    });
    useSdk(server);
  });
  afterAll(async () => {
    if (server) expect(await server.shutdown()).toBe(0);
  });

  it('creates, lists, gets and refuses bad or duplicate names', async () => {
    const vol = await Volume.create('alpha');
    expect(vol.volumeId).toMatch(/^[0-9a-f-]{36}$/);
    expect(vol.token).toMatch(/^[0-9a-f]{64}$/);
    expect((await Volume.list()).map((v) => v.name)).toContain('alpha');
    expect(await Volume.getInfo(vol.volumeId)).toMatchObject({ name: 'alpha', volumeId: vol.volumeId });

    await expect(Volume.create('alpha')).rejects.toThrow(/409/);
    for (const bad of ['', '..', '../etc', 'a/b', '.hidden', 'x'.repeat(64), 'sp ace', 'nul\0']) {
      const r = await server.api('POST', '/volumes', { name: bad });
      expect(r.status, JSON.stringify(bad)).toBe(400);
      expect(r.body).toMatchObject({ code: 400, message: expect.stringContaining('volume name') });
    }
    for (const body of [undefined, [], { name: 5 }, { name: 'ok', sizeMB: 1 }]) {
      expect((await server.api('POST', '/volumes', body)).status, JSON.stringify(body)).toBe(400);
    }
    await expect(Volume.getInfo('00000000-0000-4000-8000-000000000000')).rejects.toThrow(/not found/);
    expect((await server.api('GET', '/volumes/..%2F..%2Fetc')).status).toBe(404);
    expect(await Volume.destroy('00000000-0000-4000-8000-000000000000')).toBe(false);
    expect(await Volume.destroy(vol.volumeId)).toBe(true);
    expect((await Volume.list()).map((v) => v.name)).not.toContain('alpha');
  });

  it('refuses hostile volumeMounts without creating a sandbox', async () => {
    const vol = await Volume.create('hostile');
    const other = await Volume.create('hostile2');
    const before = (await server.api('GET', '/v2/sandboxes')).body.length;
    const cases: unknown[] = [
      [{ name: 'hostile', path: '/' }],
      [{ name: 'hostile', path: 'relative' }],
      [{ name: 'hostile', path: '/proc/x' }],
      [{ name: 'hostile', path: '/agentenv' }],
      [{ name: 'hostile', path: '/run' }],
      [{ name: 'hostile', path: '/etc' }],
      [{ name: 'hostile', path: '/mnt/../etc' }],
      [{ name: 'hostile', path: '/mnt/a,b' }],
      [{ name: 'missing', path: '/mnt/m' }],
      [{ name: '../x', path: '/mnt/m' }],
      [
        { name: 'hostile', path: '/mnt/a' },
        { name: 'hostile2', path: '/mnt/a/b' },
      ],
      [
        { name: 'hostile', path: '/mnt/a' },
        { name: 'hostile2', path: '/mnt/b' },
        { name: 'hostile', path: '/mnt/c' },
      ],
      'not-a-list',
      [{ name: 'hostile' }],
    ];
    for (const volumeMounts of cases) {
      const r = await server.api('POST', '/v2/sandboxes', { templateID: 'base', volumeMounts });
      expect(r.status, JSON.stringify(volumeMounts)).toBeGreaterThanOrEqual(400);
      expect(r.status, JSON.stringify(volumeMounts)).toBeLessThan(500);
      expect(r.body.code).toBe(r.status);
    }
    expect((await server.api('GET', '/v2/sandboxes')).body.length).toBe(before);
    expect(await Volume.destroy(vol.volumeId)).toBe(true);
    expect(await Volume.destroy(other.volumeId)).toBe(true);
  });

  it('is shared by two sandboxes, survives pause, resume, fork and kill, and is refused deletion while mounted', async () => {
    const vol = await Volume.create('shared');
    const a = await Sandbox.create({ volumeMounts: { [MOUNT]: vol }, timeoutMs: 300_000 });
    const b = await Sandbox.create({ volumeMounts: { [MOUNT]: 'shared' }, timeoutMs: 300_000 });
    expect((await Sandbox.getInfo(a.sandboxId)).volumeMounts).toEqual([{ name: 'shared', path: MOUNT }]);

    // nosuid,nodev inside; written by the sandbox user in one, read with the same owner in the other.
    const opts = (await a.commands.run(`awk '$2 == "${MOUNT}" {print $4}' /proc/mounts`)).stdout;
    expect(opts).toMatch(/nosuid/);
    expect(opts).toMatch(/nodev/);
    await a.commands.run(`echo from-a > ${MOUNT}/a.txt && mkdir -p ${MOUNT}/dir`);
    const uidA = (await a.commands.run('id -u')).stdout.trim();
    expect((await b.files.read(`${MOUNT}/a.txt`)).trim()).toBe('from-a');
    expect((await b.commands.run(`stat -c %u ${MOUNT}/a.txt`)).stdout.trim()).toBe(uidA);
    await b.commands.run(`echo from-b > ${MOUNT}/dir/b.txt`);
    expect((await a.commands.run(`cat ${MOUNT}/dir/b.txt`)).stdout.trim()).toBe('from-b');
    // The quota: writes past max_size_mb fail inside the sandbox, and what fit stays readable.
    const big = await a.commands
      .run(`dd if=/dev/zero of=${MOUNT}/big bs=1M count=100 2>&1; sync`, {})
      .catch((e: { stdout?: string; stderr?: string }) => ({ stdout: `${e.stdout ?? ''}${e.stderr ?? ''}` }));
    expect(big.stdout).toMatch(/quota|No space/i);
    await a.commands.run(`rm -f ${MOUNT}/big`);

    // Deleting while mounted is refused, and nothing is lost.
    const refused = await Volume.destroy(vol.volumeId).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(VolumeError);
    expect(String(refused)).toMatch(/409.*mounted/);

    // Pause both (to disk), write nothing in between, resume both: the volume is mounted again.
    expect(await a.betaPause()).toBe(true);
    await b.commands.run(`echo while-a-paused > ${MOUNT}/p.txt`);
    expect(await b.betaPause()).toBe(true);
    expect((await Volume.destroy(vol.volumeId).catch((e: unknown) => e)) instanceof VolumeError).toBe(true);
    const a2 = await Sandbox.connect(a.sandboxId, { timeoutMs: 300_000 });
    const b2 = await Sandbox.connect(b.sandboxId, { timeoutMs: 300_000 });
    expect((await a2.commands.run(`cat ${MOUNT}/p.txt`)).stdout.trim()).toBe('while-a-paused');
    await a2.commands.run(`echo after-resume > ${MOUNT}/r.txt`);
    expect((await b2.commands.run(`cat ${MOUNT}/r.txt ${MOUNT}/a.txt`)).stdout).toBe(
      'after-resume\nfrom-a\n',
    );

    // A fork mounts the same volume (not a copy): its writes show in the source's view.
    const [child] = await a2.fork({ count: 1, timeoutMs: 300_000 });
    if (!(child instanceof Sandbox)) throw child;
    expect((await child.commands.run(`cat ${MOUNT}/a.txt`)).stdout.trim()).toBe('from-a');
    await child.commands.run(`echo from-child > ${MOUNT}/c.txt`);
    expect((await b2.commands.run(`cat ${MOUNT}/c.txt`)).stdout.trim()).toBe('from-child');

    for (const s of [a2, b2, child]) await s.kill();
    // A new sandbox finds everything; once it is gone too, the volume can be deleted.
    const c = await Sandbox.create({ volumeMounts: { '/data': vol }, timeoutMs: 120_000 });
    expect((await c.commands.run('cat /data/a.txt /data/dir/b.txt /data/c.txt')).stdout).toBe(
      'from-a\nfrom-b\nfrom-child\n',
    );
    await c.kill();
    expect(await Volume.destroy(vol.volumeId)).toBe(true);
    expect(existsSync(join(server.home, 'sandboxes', '.volumes', vol.volumeId))).toBe(false);
  });
});
