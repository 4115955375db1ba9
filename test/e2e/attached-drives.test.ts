// Attached drives on cold starts (docs/volumes.md "Attached drives"): image-backed drives from the loopback
// registry, read-only and writable; a writable drive's changes travel with the sandbox's disk through pause and
// resume (memory and disk only), a fork and a snapshot launch; a kill leaves none of their mounts.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import { describeNode } from './fixture.js';

const REGISTRY = process.env.AENV_TEST_REGISTRY ?? '127.0.0.1:5000';
const BUSYBOX = `${REGISTRY}/aenv/busybox:latest`;
const BASE = `${REGISTRY}/aenv/base:latest`;

/** Host mounts under the sandbox's dir: `<id>`, or `<id>-rN` for a resume that ran beside its old container's release. */
const hostMounts = (id: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => new RegExp(`/sandboxes/${id}(-r\\d+)?/`).test(m));

describe('attached drives', () => {
  const { server } = describeNode({
    name: 'drives',
    toml: [
      '[image.resolver]',
      `insecure_registries = ["${REGISTRY}"]`,
      `allowed_registries = ["${REGISTRY}"]`,
      `search_registries = ["${REGISTRY}"]`,
      '[orchestrator]',
      // Every resume is a restore into a fresh slot: the drives' mounts are made again each time.
      'resident_pause_grace_secs = 0',
      '',
    ].join('\n'),
  });

  const sh = async (sbx: Sandbox, cmd: string) => {
    const r = await sbx.commands.run(cmd, { user: 'root' }).catch((e: { result?: unknown }) => e.result);
    return r as { exitCode: number; stdout: string; stderr: string };
  };

  it('mounts a read-only and a writable drive whose writes survive pause, resume, fork and snapshot', async () => {
    const r = await server.api('POST', '/sandboxes-cold', {
      image: BASE,
      timeout: 300,
      attachedDrives: [
        { driveID: 'tools', source: { image: BUSYBOX } },
        { driveID: 'bin', readOnly: true, mountPath: '/opt/bb', subPath: 'bin', source: { image: BUSYBOX } },
        { driveID: 'work', readOnly: false, mountPath: '/data', source: { image: BUSYBOX } },
      ],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    const id = r.body.sandboxID as string;
    const sbx = await Sandbox.connect(id);
    // Read-only, at the default /mnt/<driveID>, and a subPath: the image's files, not writable even by root.
    expect((await sh(sbx, 'ls /mnt/tools/bin/busybox /opt/bb/busybox')).exitCode).toBe(0);
    const ro = await sh(sbx, 'touch /mnt/tools/x; echo $?; touch /opt/bb/x; echo $?');
    expect(ro.stdout.trim().split('\n')).toEqual(['1', '1']);
    expect(await sh(sbx, 'grep " /mnt/tools " /proc/mounts')).toMatchObject({
      stdout: expect.stringMatching(/ ro,.*nosuid,nodev/),
    });
    // Writable: the image shows through, and changes (new files, deletions) are the sandbox's.
    const w = await sh(
      sbx,
      'echo one > /data/note && rm /data/bin/busybox && ls /data/bin/busybox; cat /data/note',
    );
    expect(w.stdout.trim()).toBe('one');
    // The rootfs does not show the drive's changes anywhere else.
    expect((await sh(sbx, 'test -e /note || test -e /mnt/note; echo $?')).stdout.trim()).toBe('1');

    // Pause with memory, resume (a restore into a fresh slot): a process started before runs on after it.
    const bg = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 });
    await sbx.pause();
    const back = await Sandbox.connect(id, { timeoutMs: 300_000 });
    expect((await sh(back, `kill -0 ${bg.pid} && echo alive`)).stdout).toBe('alive\n');
    expect((await sh(back, 'cat /data/note; ls /data/bin/busybox')).stdout.trim()).toBe('one');
    expect((await sh(back, 'touch /mnt/tools/y; echo $?')).stdout.trim()).toBe('1');
    await sh(back, 'echo two >> /data/note');

    // Pause keeping only the disk: the resume boots on it, with the drives mounted again.
    await back.pause({ keepMemory: false });
    const booted = await Sandbox.connect(id, { timeoutMs: 300_000 });
    expect((await sh(booted, 'cat /data/note')).stdout).toBe('one\ntwo\n');
    expect((await sh(booted, 'ls /opt/bb/busybox && touch /opt/bb/z; echo $?')).stdout.trim()).toMatch(/1$/);

    // A fork gets a copy of the drive's state; its writes are its own.
    const [child] = await booted.fork({ count: 1, timeoutMs: 300_000 });
    if (!(child instanceof Sandbox)) throw child ?? new Error('no fork child');
    expect((await sh(child, 'cat /data/note')).stdout).toBe('one\ntwo\n');
    await sh(child, 'echo child > /data/note');
    expect((await sh(booted, 'cat /data/note')).stdout).toBe('one\ntwo\n');

    // A snapshot carries the drives: a sandbox launched from it mounts them with the captured state.
    await sh(booted, 'echo snap > /data/snap');
    const snap = await booted.createSnapshot();
    const launched = await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000 });
    expect((await sh(launched, 'cat /data/snap /data/note')).stdout).toBe('snap\none\ntwo\n');
    expect(
      (await sh(launched, 'ls /mnt/tools/bin/busybox && touch /mnt/tools/q; echo $?')).stdout.trim(),
    ).toMatch(/1$/);

    // Kills leave no mount of any of them on the host.
    for (const s of [child, launched, booted]) {
      expect(hostMounts(s.sandboxId).length).toBeGreaterThan(0);
      await s.kill();
      expect(hostMounts(s.sandboxId)).toEqual([]);
    }
    await server.api('DELETE', `/templates/${snap.snapshotId}`);
  });

  it("counts a writable drive's diskSizeMB into the sandbox's disk limit, which its writes share", async () => {
    const r = await server.api('POST', '/sandboxes-cold', {
      image: BASE,
      diskSizeMB: 1024,
      timeout: 120,
      attachedDrives: [{ driveID: 'w', readOnly: false, diskSizeMB: 1024, source: { image: BUSYBOX } }],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    // The reference's diskSizeMB is the rootfs's: drives are left out of it.
    expect((await server.api('GET', `/sandboxes/${r.body.sandboxID}`)).body.diskSizeMB).toBe(1024);
    const sbx = await Sandbox.connect(r.body.sandboxID as string);
    // More than the rootfs's 1024 MiB fits (the drive's 1024 MiB are added)...
    const first = await sh(sbx, 'dd if=/dev/zero of=/mnt/w/a bs=1M count=1536 conv=fsync 2>&1; echo rc=$?');
    expect(first.stdout).toContain('rc=0');
    // ...but not more than both together.
    const second = await sh(sbx, 'dd if=/dev/zero of=/mnt/w/b bs=1M count=1024 conv=fsync 2>&1; echo rc=$?');
    expect(second.stdout).not.toContain('rc=0');
    expect(second.stdout).toMatch(/quota|No space/i);
    await sbx.kill();
  });

  it('refuses a subPath the image does not have with a 400 and leaves nothing', async () => {
    const r = await server.api('POST', '/sandboxes-cold', {
      image: BASE,
      attachedDrives: [{ driveID: 'd', subPath: 'no/such/dir', source: { image: BUSYBOX } }],
    });
    expect(r.status).toBe(400);
    expect(r.body.message).toMatch(/attached drive d: subPath no\/such\/dir is not a directory/);
    const missing = await server.api('POST', '/sandboxes-cold', {
      image: BASE,
      attachedDrives: [{ driveID: 'd', source: { image: `${REGISTRY}/aenv/no-such-image:latest` } }],
    });
    expect(missing.status, JSON.stringify(missing.body)).toBe(400);
    expect(missing.body.message).toMatch(/attached drive d image/);
    const bad = await server.api('POST', '/sandboxes-cold', {
      image: BASE,
      attachedDrives: [{ driveID: 'x', mountPath: '/proc/x', source: { image: BUSYBOX } }],
    });
    expect(bad.status).toBe(400);
    expect(bad.body.message).toMatch(/attachedDrives\[0\] \(driveID "x"\): mountPath/);
    expect((await server.api('GET', '/v2/sandboxes')).body).toEqual([]);
  });
});
