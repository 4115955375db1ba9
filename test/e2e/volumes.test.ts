// Persistent volumes through the e2b SDK (docs/volumes.md): E2B's volumes API, `volumeMounts` shared by several
// sandboxes at once, across pause (to disk) and resume, fork and kill; the hostile requests that must create
// nothing. One server for the file.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthenticationError, Sandbox, Volume, VolumeError, VolumePathNotFoundError } from 'e2b';
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
    process.env.E2B_VOLUME_API_URL = server.url;
    await removeVolumes(); // a failed earlier run's
  });
  afterAll(async () => {
    if (!server) return;
    await server.killAll();
    await removeVolumes();
    expect(await server.shutdown()).toBe(0);
  });

  const removeVolumes = async () => {
    for (const v of await Volume.list()) await Volume.destroy(v.volumeId);
  };

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
    const listed = await Sandbox.list().nextItems();
    expect(listed.find((x) => x.sandboxId === b.sandboxId)?.volumeMounts).toEqual([
      { name: 'shared', path: MOUNT },
    ]);

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

    // Pause both (to disk), resume both: the memory comes back (a process started before runs on) and the volume
    // is mounted again.
    await a.commands.run('nohup sleep 86400 >/dev/null 2>&1 & echo $! > /tmp/sleeper.pid');
    expect(await a.betaPause()).toBe(true);
    await b.commands.run(`echo while-a-paused > ${MOUNT}/p.txt`);
    expect(await b.betaPause()).toBe(true);
    expect((await Volume.destroy(vol.volumeId).catch((e: unknown) => e)) instanceof VolumeError).toBe(true);
    const a2 = await Sandbox.connect(a.sandboxId, { timeoutMs: 300_000 });
    const b2 = await Sandbox.connect(b.sandboxId, { timeoutMs: 300_000 });
    expect((await a2.commands.run(`cat ${MOUNT}/p.txt`)).stdout.trim()).toBe('while-a-paused');
    await a2.commands.run('kill -0 "$(cat /tmp/sleeper.pid)"');
    await a2.commands.run(`echo after-resume > ${MOUNT}/r.txt`);
    expect((await b2.commands.run(`cat ${MOUNT}/r.txt ${MOUNT}/a.txt`)).stdout).toBe(
      'after-resume\nfrom-a\n',
    );

    // A fork mounts the same volume (not a copy): its writes show in the source's view.
    const [child] = await a2.fork({ count: 1, timeoutMs: 300_000 });
    if (!(child instanceof Sandbox)) throw child;
    expect((await child.commands.run(`cat ${MOUNT}/a.txt`)).stdout.trim()).toBe('from-a');
    await child.commands.run('kill -0 "$(cat /tmp/sleeper.pid)"');
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

  it('serves the content API without a sandbox, and never follows what a sandbox planted', async () => {
    const vol = await Volume.create('content');
    const other = await Volume.create('content-other');
    await other.writeFile('/secret', 'other volume');
    await vol.makeDir('/dir', { uid: 1000, gid: 1000, mode: 0o755 });
    const st = await vol.writeFile('/dir/hello.txt', 'hello', { uid: 1000, gid: 1000, mode: 0o640 });
    expect(st).toMatchObject({ name: 'hello.txt', path: '/dir/hello.txt', size: 5, uid: 1000, mode: 0o640 });
    expect(await vol.readFile('/dir/hello.txt')).toBe('hello');
    expect(Buffer.from(await vol.readFile('/dir/hello.txt', { format: 'bytes' })).toString()).toBe('hello');
    expect((await vol.list('/')).map((e) => e.path)).toEqual(['/dir']);
    expect((await vol.list('/', { depth: 2 })).map((e) => e.path)).toEqual(['/dir', '/dir/hello.txt']);
    expect(await vol.exists('/dir/hello.txt')).toBe(true);
    expect(await vol.exists('/nope')).toBe(false);
    await expect(vol.readFile('/nope')).rejects.toBeInstanceOf(VolumePathNotFoundError);
    expect((await vol.updateMetadata('/dir/hello.txt', { mode: 0o644 })).mode).toBe(0o644);

    // A sandbox sees the owner the content API gave, and what it writes comes back through the API.
    const sbx = await Sandbox.create({ volumeMounts: { [MOUNT]: vol }, timeoutMs: 120_000 });
    expect((await sbx.commands.run(`stat -c '%u %g %a' ${MOUNT}/dir/hello.txt`)).stdout.trim()).toBe(
      '1000 1000 644',
    );
    await sbx.commands.run(`echo from-sandbox > ${MOUNT}/dir/s.txt`);
    expect((await vol.getInfo('/dir/s.txt')).uid).toBe(
      Number((await sbx.commands.run('id -u')).stdout.trim()),
    );
    expect(await vol.readFile('/dir/s.txt')).toBe('from-sandbox\n');
    // Planted links to the host's /etc, to the other volume's directory on the host, and up the tree.
    const otherDir = join(server.home, 'sandboxes', '.volumes', other.volumeId);
    await sbx.commands.run(
      `ln -s /etc ${MOUNT}/etc && ln -s /etc/passwd ${MOUNT}/passwd && ln -s ${otherDir} ${MOUNT}/other && ln -s ../../.. ${MOUNT}/up`,
      { user: 'root' },
    );
    for (const p of ['/etc/passwd', '/passwd', '/other/secret', '/up/etc/passwd', '/../etc/passwd', '..']) {
      const e = await vol.readFile(p).catch((err: unknown) => err);
      expect(e, p).toBeInstanceOf(VolumeError);
      expect(String(e), p).toMatch(/400/);
    }
    await expect(vol.writeFile('/other/secret', 'overwritten')).rejects.toThrow(/400/);
    await expect(vol.list('/etc')).rejects.toThrow(/400/);
    expect(await other.readFile('/secret')).toBe('other volume');
    expect((await vol.getInfo('/etc')).type).toBe('symlink');
    await vol.remove('/etc'); // the link, not the host's /etc
    expect(existsSync('/etc/passwd')).toBe(true);

    // Quota: a write past max_size_mb is the SDK's VolumeError with the 507, and the volume stays usable.
    const big = await vol.writeFile('/big', new Uint8Array(80 * 1024 * 1024).buffer).catch((e: unknown) => e);
    expect(big).toBeInstanceOf(VolumeError);
    expect(String(big)).toMatch(/507.*full/);
    expect(await vol.exists('/big')).toBe(false);
    await vol.writeFile('/after-full.txt', 'fits');
    expect((await sbx.commands.run(`cat ${MOUNT}/after-full.txt`)).stdout).toBe('fits');
    await sbx.kill();

    // Another volume's token (or none) opens nothing.
    const forged = new Volume(vol.volumeId, vol.name, other.token);
    await expect(forged.readFile('/dir/hello.txt')).rejects.toBeInstanceOf(AuthenticationError);
    const r = await fetch(`${server.url}/volumecontent/${vol.volumeId}/file?path=/dir/hello.txt`);
    expect(r.status).toBe(401);
    // Hostile queries, methods and bodies: each a 4xx {code, message}, nothing written.
    const auth = { authorization: `Bearer ${vol.token}` };
    const hostile: [string, string, string?][] = [
      ['GET', 'file'],
      ['GET', 'file?path=%00'],
      ['GET', 'dir?path=/&depth=0'],
      ['GET', 'dir?path=/&depth=99'],
      ['GET', 'dir?path=/&depth=abc'],
      ['PUT', 'file?path=/x&uid=-1', 'x'],
      ['PUT', 'file?path=/x&uid=70000', 'x'],
      ['PUT', 'file?path=/x&mode=2541', 'x'],
      ['PUT', 'file?path=/x&force=maybe', 'x'],
      ['PUT', 'file?path=/', 'x'],
      ['POST', 'file?path=/x', 'x'],
      ['DELETE', 'path?path=/'],
      ['PATCH', 'path?path=/dir', '[1]'],
      ['PATCH', 'path?path=/dir', '{"mode":"777"}'],
      ['PATCH', 'path?path=/dir', 'x'.repeat(10000)],
    ];
    for (const [method, route, body] of hostile) {
      const h = await fetch(`${server.url}/volumecontent/${vol.volumeId}/${route}`, {
        method,
        headers: auth,
        ...(body !== undefined ? { body } : {}),
      });
      expect(h.status, `${method} ${route}`).toBeGreaterThanOrEqual(400);
      expect(h.status, `${method} ${route}`).toBeLessThan(500);
      expect(((await h.json()) as { code: number }).code, `${method} ${route}`).toBe(h.status);
    }
    expect(await vol.exists('/x')).toBe(false);
    expect(
      (await fetch(`${server.url}/volumecontent/not-a-volume/file?path=/x`, { headers: auth })).status,
    ).toBe(401);
    await vol.remove('/dir');
    expect((await vol.list('/')).map((e) => e.name)).toEqual(['after-full.txt', 'other', 'passwd', 'up']);
    expect(await Volume.destroy(vol.volumeId)).toBe(true);
    expect(await Volume.destroy(other.volumeId)).toBe(true);
  });

  it('keeps every acknowledged write across a server crash (kill -9 during writes)', async () => {
    const vol = await Volume.create('crashy');
    // A sandbox mounting it runs through the crash: after the restart it still has the volume, and holds it.
    const sbx = await Sandbox.create({ volumeMounts: { [MOUNT]: vol }, timeoutMs: 300_000 });
    const acked: number[] = [];
    let stop = false;
    const writer = async (lane: number) => {
      for (let i = lane; !stop && i < 2000; i += 4) {
        try {
          await vol.writeFile(`/f-${i}`, `payload-${i}-${'x'.repeat(4096)}`);
        } catch {
          return;
        }
        acked.push(i);
      }
    };
    const lanes = [0, 1, 2, 3].map(writer);
    while (acked.length < 40) await new Promise((res) => setTimeout(res, 10));
    await server.crash();
    stop = true;
    await Promise.all(lanes);
    server = await server.restart();
    useSdk(server);
    process.env.E2B_VOLUME_API_URL = server.url;
    const again = await Volume.connect(vol.volumeId);
    for (const i of acked)
      expect(await again.readFile(`/f-${i}`), `f-${i}`).toBe(`payload-${i}-${'x'.repeat(4096)}`);
    // No half-written temporary file is visible as data; a new write works.
    for (const e of await again.list('/')) expect(e.name).toMatch(/^(f-\d+|\.aenv-write-[0-9a-f]+)$/);
    await again.writeFile('/after', 'ok');
    const survivor = await Sandbox.connect(sbx.sandboxId);
    const seen = await survivor.commands.run(`cat ${MOUNT}/after; head -c 20 ${MOUNT}/f-${acked[0]}`);
    expect(seen.stdout).toBe(`ok${`payload-${acked[0]}-${'x'.repeat(4096)}`.slice(0, 20)}`);
    await expect(Volume.destroy(vol.volumeId)).rejects.toThrow(/409/);
    await survivor.kill();
    expect(await Volume.destroy(vol.volumeId)).toBe(true);
  });

  it('launches a snapshot with the volumes it was taken with, and refuses it clearly once one is gone', async () => {
    const vol = await Volume.create('snapvol');
    const src = await Sandbox.create({ volumeMounts: { '/data': vol }, timeoutMs: 300_000 });
    await src.commands.run('echo before-snapshot > /data/s.txt && echo on-disk > /var/tmp/own.txt');
    const snap = await src.createSnapshot();
    await src.kill();
    await vol.writeFile('/after.txt', 'written after the snapshot\n');

    // The volume is mounted again (not a copy): what was written after the snapshot is there too.
    const launched = await Sandbox.create(snap.snapshotId, { timeoutMs: 120_000 });
    expect((await Sandbox.getInfo(launched.sandboxId)).volumeMounts).toEqual([
      { name: 'snapvol', path: '/data' },
    ]);
    expect((await launched.commands.run('cat /data/s.txt /data/after.txt /var/tmp/own.txt')).stdout).toBe(
      'before-snapshot\nwritten after the snapshot\non-disk\n',
    );
    await launched.kill();

    expect(await Volume.destroy(vol.volumeId)).toBe(true);
    const r = await server.api('POST', '/v2/sandboxes', { templateID: snap.snapshotId });
    expect(r.status).toBe(400);
    expect(r.body.message).toMatch(/snapvol.*no longer exists.*\/data/);
    // Another volume at that path stands in for it.
    await Volume.create('standin');
    const again = await Sandbox.create(snap.snapshotId, {
      volumeMounts: { '/data': 'standin' },
      timeoutMs: 120_000,
    });
    expect((await again.commands.run('ls -A /data; cat /var/tmp/own.txt')).stdout).toBe('on-disk\n');
    await again.kill();
    await server.api('DELETE', `/templates/${snap.snapshotId}`);
  });
});
