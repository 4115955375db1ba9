import { describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import { describeNode } from './fixture.js';

describe('sandbox lifecycle through the e2b SDK', () => {
  const { server } = describeNode({ name: 'life' });

  it('creates from base, runs commands as user and root, and kills', async () => {
    const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { suite: 'life' } });
    const r = await sbx.commands.run('echo hello; id -un; pwd; hostname');
    expect(r.exitCode).toBe(0);
    expect(r.stdout.split('\n')).toEqual(['hello', 'user', '/home/user', sbx.sandboxId, '']);
    expect((await sbx.commands.run('id -u', { user: 'root' })).stdout.trim()).toBe('0');
    const info = await sbx.getInfo();
    expect(info.metadata).toEqual({ suite: 'life' });
    expect(info.state).toBe('running');
    expect(await sbx.isRunning()).toBe(true);
    expect(await sbx.kill()).toBe(true);
    expect(await sbx.isRunning()).toBe(false);
    expect(await Sandbox.kill(sbx.sandboxId)).toBe(false);
  });

  it('answers bad requests in the documented shape', async () => {
    const missing = await server.api('POST', '/sandboxes', { templateID: 'no-such-template' });
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ code: 404, message: 'template no-such-template not found' });
    const bad = await server.api('POST', '/sandboxes', { templateID: 'base', timeout: -1 });
    expect(bad.status).toBe(400);
    expect(bad.body.message).toMatch(/timeout/);
    const domain = await server.api('POST', '/sandboxes', {
      templateID: 'base',
      network: { denyOut: ['example.com'] },
    });
    expect(domain.status).toBe(400);
    const nf = await server.api('GET', '/sandboxes/not-a-uuid');
    expect(nf.body).toEqual({ code: 404, message: 'sandbox not-a-uuid not found' });
  });

  it('kills a sandbox on expiry when onTimeout is kill', async () => {
    const sbx = await Sandbox.create({ timeoutMs: 2_000, lifecycle: { onTimeout: 'kill' } });
    await new Promise((r) => setTimeout(r, 5_000));
    expect((await server.api('GET', `/sandboxes/${sbx.sandboxId}`)).status).toBe(404);
  });
});
