// The sandbox factory's rollback on a real node: every assembly fails right after envd answered (everything is
// in place then: slot, netns, nft chain, overlay mounts, cgroup, runc container, uid range, image lease), and
// neither a create nor a template build leaves any of it behind. See backend/sandbox-factory.ts.
import { describe, expect, it } from 'vitest';
import { Template } from 'e2b';
import { hostObjects, strayHostObjects } from './harness.js';
import { describeNode } from './fixture.js';

const BASE = 'oci:/var/cache/aenv/images/base:latest';

describe('a sandbox assembly that fails midway', () => {
  const { server } = describeNode({
    name: 'frb',
    env: { AENV_FAULT_FAIL_AFTER: 'factory:envd-healthy' },
  });

  /** Sandbox mounts (overlay rootfs, sysfs, disks) of the node: none may stay, build sandboxes' included. */
  const sandboxMounts = () =>
    hostObjects(server).mounts.filter((m) => m.startsWith(`${server.home}/sandboxes/`));

  it('fails a create and leaves no slot, mount, cgroup, container or record behind', async () => {
    for (let i = 0; i < 2; i++) {
      const r = await server.api('POST', '/sandboxes', { templateID: 'base', timeout: 60 });
      expect(r.status).toBeGreaterThanOrEqual(500);
      expect(r.body.code).toBe(r.status);
    }
    expect(server.logs()).toContain('failure injected after factory:envd-healthy');
    expect((await server.api('GET', '/v2/sandboxes')).body).toEqual([]);
    expect(await strayHostObjects(server)).toEqual([]);
    expect(sandboxMounts()).toEqual([]);
    expect(hostObjects(server).runcContainers).toEqual([]);
    expect(hostObjects(server).cgroups).toEqual([]);
  });

  it('fails a template build in its build sandbox and leaves nothing of that sandbox behind', async () => {
    const name = `frb-${Date.now().toString(36)}`;
    const template = Template().fromImage(BASE).runCmd('echo never');
    await expect(Template.build(template, name, { cpuCount: 1, memoryMB: 512 })).rejects.toThrow();
    const listed = await server.api('GET', '/templates');
    const t = (listed.body as { templateID: string; names: string[]; buildStatus?: string }[]).find((x) =>
      x.names.includes(name),
    );
    if (t) await server.api('DELETE', `/templates/${t.templateID}`);
    expect(server.logs().match(/failure injected after factory:envd-healthy/g)?.length).toBeGreaterThan(2);
    expect(await strayHostObjects(server)).toEqual([]);
    expect(sandboxMounts()).toEqual([]);
    expect(hostObjects(server).runcContainers).toEqual([]);
    expect(hostObjects(server).cgroups).toEqual([]);
  });
});
