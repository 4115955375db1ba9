// What the current e2b SDK (2.51, v2 routes only) expects of the API and of envd, through the SDK itself: the v2
// create defaults, fields aenv refuses, resume from disk of secure sandboxes, per-boot ids, uploads anywhere,
// list filters and snapshot deletion. The server releases a paused sandbox's memory at once, so every memory
// resume here is a CRIU restore (not a thaw).
import { describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { Sandbox, Secret, type SandboxOpts } from 'e2b';
import { ENVD_PORT, eventually, hostObjects, proxyFetch } from './harness.js';
import { describeNode } from './fixture.js';

const UUID_LINE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$/;

describe('E2B API currency through the e2b SDK', () => {
  const { server, track, trackId } = describeNode({
    name: 'acore1',
    toml: '[orchestrator]\nresident_pause_grace_secs = 0',
  });
  const info = async (id: string) => (await server.api('GET', `/sandboxes/${id}`)).body;
  const bootId = async (sbx: Sandbox) =>
    (await sbx.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout;
  /** Paused and released from memory: nothing of it runs on the host until it is resumed. */
  const released = (id: string) =>
    eventually(() => !hostObjects(server).runcContainers.includes(id), `the memory of ${id} to be released`);

  it('Sandbox.create() with no options is secured, lives 300 s and is killed at its timeout', async () => {
    const sbx = track(await Sandbox.create());
    const detail = await info(sbx.sandboxId);
    expect(detail.envdAccessToken).toMatch(/.+/);
    expect(detail.lifecycle).toEqual({ onTimeout: 'kill', autoResume: false });
    const lifetime = Date.parse(detail.endAt) - Date.parse(detail.startedAt);
    expect(lifetime).toBeGreaterThanOrEqual(300_000);
    expect(lifetime).toBeLessThan(360_000);
    // envd is closed without the token; the SDK's signed URLs work (they need the token to be signed).
    const open = await proxyFetch(server, sbx.sandboxId, ENVD_PORT, '/process.Process/List', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(open.status).toBe(401);
    const up = await fetch(await sbx.uploadUrl('/home/user/signed.txt'), {
      method: 'POST',
      body: (() => {
        const form = new FormData();
        form.append('file', new Blob(['via a signed url']), 'signed.txt');
        return form;
      })(),
    });
    expect(up.status).toBe(200);
    const down = await fetch(await sbx.downloadUrl('/home/user/signed.txt'));
    expect(await down.text()).toBe('via a signed url');

    // v1 keeps the reference's defaults: no token unless asked, [orchestrator] timeout (15 s), autoPause.
    const v1 = await server.api('POST', '/sandboxes', { templateID: 'base' });
    expect(v1.status).toBe(201);
    trackId(v1.body.sandboxID);
    expect(v1.body.envdAccessToken).toBeUndefined();
    const v1Detail = await info(v1.body.sandboxID);
    expect(v1Detail.lifecycle).toEqual({ onTimeout: 'pause', autoResume: false });
    expect(Date.parse(v1Detail.endAt) - Date.parse(v1Detail.startedAt)).toBeLessThan(60_000);
    // `secure: false` is no NewSandboxV2 field: a v2 sandbox is secured whatever a client sends there.
    const v2 = await server.api('POST', '/v2/sandboxes', { templateID: 'base', secure: false, timeout: 60 });
    trackId(v2.body.sandboxID);
    expect(v2.body.envdAccessToken).toMatch(/.+/);
  });

  it('refuses, naming them, the fields it does not implement', async () => {
    const refusals: [string, SandboxOpts][] = [
      [
        'iam',
        {
          iam: { tokens: { aws: Secret.iamToken({ audience: 'sts.amazonaws.com', tokenType: 'JWT-SVID' }) } },
        },
      ],
      ['mcp', { mcp: { 'github-official': { githubPersonalAccessToken: 'x' } } as never }],
    ];
    for (const [field, opts] of refusals) {
      const err = await Sandbox.create(opts).then(
        (s) => track(s) && undefined,
        (e: unknown) => e as Error,
      );
      expect(err?.message, field).toMatch(new RegExp(`^400: ${field.replace('.', '\\.')} is not supported`));
    }
    // Nothing was started for any of them.
    expect(hostObjects(server).runcContainers).toEqual([]);
    // The SDK checks this combination itself; the API refuses it as well.
    const combo = await server.api('POST', '/v2/sandboxes', {
      templateID: 'base',
      autoPause: true,
      autoPauseMemory: false,
      autoResume: { enabled: true },
    });
    expect(combo.status).toBe(400);
    expect(combo.body.message).toBe('autoPauseMemory: false cannot be combined with autoResume');
    const sbx = track(await Sandbox.create({ timeoutMs: 60_000 }));
    // network.rules are served (egress-rules.test.ts); a bad key is the SDK's 400 naming it.
    await expect(sbx.updateNetwork({ rules: { '*': [{}] } })).rejects.toThrow(/^400: rules\["\*"\]: the key/);
  });

  it('resumes a secure sandbox from disk after a filesystem-only pause and a reboot connect', async () => {
    const sbx = track(await Sandbox.create({ envs: { FROM_CREATE: 'kept' } }));
    await sbx.files.write('notes/kept.txt', 'on disk');
    const sleeper = await sbx.commands.run('sleep 3600', { background: true });
    await sleeper.disconnect();

    expect(await sbx.pause({ keepMemory: false })).toBe(true);
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'filesystem' });
    await released(sbx.sandboxId);
    await sbx.connect();
    expect(await sbx.files.read('notes/kept.txt')).toBe('on disk');
    expect((await sbx.commands.run('echo "$FROM_CREATE"')).stdout).toBe('kept\n');
    expect((await sbx.commands.list()).map((p) => p.pid)).not.toContain(sleeper.pid);

    const again = await sbx.commands.run('sleep 3600', { background: true });
    await again.disconnect();
    expect(await sbx.pause()).toBe(true);
    expect((await info(sbx.sandboxId)).pauseKind).toBe('memory');
    const rebooted = await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' });
    expect(await rebooted.files.read('notes/kept.txt')).toBe('on disk');
    expect((await rebooted.commands.list()).map((p) => p.pid)).not.toContain(again.pid);
  });

  it('gives every boot its own boot id, which a memory restore keeps', async () => {
    const host = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8');
    const sbx = track(await Sandbox.create());
    const other = track(await Sandbox.create({ timeoutMs: 60_000 }));
    const first = await bootId(sbx);
    expect(first).toMatch(UUID_LINE);
    expect(first).not.toBe(host);
    expect(await bootId(other)).not.toBe(first);
    // Like the kernel's, it cannot be written, even by root.
    const write = await sbx.commands
      .run('echo x > /proc/sys/kernel/random/boot_id', { user: 'root' })
      .catch((e: { exitCode: number }) => e);
    expect(write.exitCode).not.toBe(0);

    // A memory pause is a CRIU checkpoint here; the restored processes see the boot id they saw.
    const sleeper = await sbx.commands.run('sleep 3600', { background: true });
    await sleeper.disconnect();
    await sbx.pause();
    await released(sbx.sandboxId);
    await sbx.connect();
    expect((await sbx.commands.list()).map((p) => p.pid)).toContain(sleeper.pid);
    expect(await bootId(sbx)).toBe(first);

    // A cold boot is a new boot.
    await sbx.pause({ keepMemory: false });
    await sbx.connect();
    const cold = await bootId(sbx);
    expect(cold).toMatch(UUID_LINE);
    expect(cold).not.toBe(first);
    await sbx.pause();
    await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' });
    expect(await bootId(sbx)).not.toBe(cold);
  });

  it('does not auto-resume a filesystem-only pause; connect and the v1 resume bring it back', async () => {
    const sbx = track(
      await Sandbox.create({ timeoutMs: 120_000, lifecycle: { onTimeout: 'pause', autoResume: true } }),
    );
    await sbx.pause({ keepMemory: false });
    await released(sbx.sandboxId);
    // The token is checked before anything else (docs/security.md); past it, health reads the pause as E2B's.
    expect((await proxyFetch(server, sbx.sandboxId, ENVD_PORT, '/health')).status).toBe(401);
    const token = (await info(sbx.sandboxId)).envdAccessToken as string;
    expect(token).toMatch(/.+/);
    const health = await proxyFetch(server, sbx.sandboxId, ENVD_PORT, '/health', {
      headers: { 'x-access-token': token },
    });
    expect(health.status).toBe(502);
    expect(await sbx.isRunning()).toBe(false);
    expect((await proxyFetch(server, sbx.sandboxId, 8000, '/', { prefix: true })).status).toBe(410);
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'filesystem' });
    await sbx.connect();
    expect(await sbx.isRunning()).toBe(true);

    // ResumedSandbox: `memory: false` boots the saved disk of a memory pause; `autoPause` replaces the timeout
    // action.
    const sleeper = await sbx.commands.run('sleep 3600', { background: true });
    await sleeper.disconnect();
    await sbx.pause();
    expect((await info(sbx.sandboxId)).pauseKind).toBe('memory');
    const resumed = await server.api('POST', `/sandboxes/${sbx.sandboxId}/resume`, {
      timeout: 120,
      memory: false,
      autoPause: false,
    });
    expect(resumed.status).toBe(201);
    expect(resumed.body.envdAccessToken).toMatch(/.+/);
    expect((await sbx.commands.list()).map((p) => p.pid)).not.toContain(sleeper.pid);
    expect((await info(sbx.sandboxId)).lifecycle).toEqual({ onTimeout: 'kill', autoResume: true });
    // v1 connect takes `memory` too.
    await sbx.pause();
    const v1 = await server.api('POST', `/sandboxes/${sbx.sandboxId}/connect`, {
      timeout: 60,
      memory: false,
    });
    expect(v1.status).toBe(201);
  });

  it('writes files anywhere as the user, as E2B does: root writes, then hands them to the user', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 120_000 }));
    await sbx.files.write('/0/x', 'at the root');
    expect(await sbx.files.read('/0/x')).toBe('at the root');
    expect(await sbx.files.getInfo('/0/x')).toMatchObject({ owner: 'user', group: 'user' });
    expect(await sbx.files.getInfo('/0')).toMatchObject({ owner: 'user', permissions: 'drwxr-xr-x' });

    // Missing parents are made 0755 and owned by the user; existing ones are left as they are.
    await sbx.files.write('/srv/made/deeper/f.txt', 'deep', { useOctetStream: true });
    for (const dir of ['/srv/made', '/srv/made/deeper'])
      expect(await sbx.files.getInfo(dir), dir).toMatchObject({ owner: 'user', permissions: 'drwxr-xr-x' });
    expect(await sbx.files.getInfo('/srv')).toMatchObject({ owner: 'root' });

    // An existing root file becomes the writer's, as on E2B.
    await sbx.commands.run('echo root > /opt/owned-by-root && chmod 644 /opt/owned-by-root', {
      user: 'root',
    });
    await sbx.files.write('/opt/owned-by-root', 'now the user');
    expect(await sbx.files.getInfo('/opt/owned-by-root')).toMatchObject({ owner: 'user' });
    await sbx.files.write('/opt/for-root', 'root', { user: 'root' });
    expect(await sbx.files.getInfo('/opt/for-root')).toMatchObject({ owner: 'root' });

    // Paths stay inside the sandbox, written as root or not: `..` and absolute symlinks resolve in it.
    const marker = `aenv-acore-escape-${sbx.sandboxId}`;
    await sbx.commands.run(`ln -s /../../../../../../tmp /home/user/esc`);
    await sbx.files.write(`esc/${marker}`, 'inside');
    await sbx.files.write(`../../../../../../tmp/${marker}.2`, 'inside');
    expect((await sbx.commands.run(`cat /tmp/${marker} /tmp/${marker}.2`)).stdout).toBe('insideinside');
    expect(existsSync(`/tmp/${marker}`) || existsSync(`/tmp/${marker}.2`)).toBe(false);
    // A directory is still no file.
    await expect(sbx.files.write('/0', 'x')).rejects.toThrow(/is a directory/);
  });

  it('lists sandboxes started at or after startedAfter, the bound included', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 60_000 }));
    const started = (await sbx.getInfo()).startedAt;
    const at = await Sandbox.list({ query: { startedAfter: started } }).nextItems();
    expect(at.map((s) => s.sandboxId)).toContain(sbx.sandboxId);
    const after = await Sandbox.list({
      query: { startedAfter: new Date(started.getTime() + 1) },
    }).nextItems();
    expect(after.map((s) => s.sandboxId)).not.toContain(sbx.sandboxId);
  });

  it('deleteSnapshot answers true once, then false', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 60_000 }));
    const snap = await sbx.createSnapshot();
    expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(true);
    expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(false);
    const raw = await server.api('DELETE', `/templates/${snap.snapshotId}`);
    expect(raw.status).toBe(404);
    expect(raw.body).toEqual({ code: 404, message: `template '${snap.snapshotId}' not found` });
  });
});
