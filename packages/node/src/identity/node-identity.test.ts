import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { isUuidV7, NIL_UUID } from '@aenv/protocol';
import type { MachineInfo } from './machine-info.js';
import { resolveNodeIdentity, serverVersion, systemHostname } from './node-identity.js';

const machineInfo: MachineInfo = {
  cpuFamily: '6',
  cpuModel: '85',
  cpuModelName: 'Test CPU',
  cpuArchitecture: 'x86_64',
};
const fixed = { hostname: () => 'host-1', machineInfo };

describe('node identity', () => {
  it('uses configured values', () => {
    const { identity, warnings } = resolveNodeIdentity(
      { node_id: 'node-a', cluster_id: '0193A1B2-0000-7000-8000-000000000001', service_instance_id: 'svc-a' },
      { ...fixed, version: '1.2.3', commit: 'abc123' },
    );
    expect(identity).toEqual({
      nodeId: 'node-a',
      clusterId: '0193a1b2-0000-7000-8000-000000000001',
      serviceInstanceId: 'svc-a',
      version: '1.2.3',
      commit: 'abc123',
      machineInfo,
    });
    expect(warnings).toEqual([]);
  });

  it('defaults node id to the host name and the instance id to a fresh UUIDv7', () => {
    const a = resolveNodeIdentity({ cluster_id: NIL_UUID }, fixed).identity;
    const b = resolveNodeIdentity({ node_id: '  ', cluster_id: NIL_UUID }, fixed).identity;
    expect(a.nodeId).toBe('host-1');
    expect(b.nodeId).toBe('host-1');
    expect(isUuidV7(a.serviceInstanceId)).toBe(true);
    expect(b.serviceInstanceId).not.toBe(a.serviceInstanceId);
    expect(a.commit).toBe('unknown');
  });

  it('turns a missing or invalid cluster id into the nil UUID (invalid → warning)', () => {
    expect(resolveNodeIdentity({}, fixed)).toMatchObject({ identity: { clusterId: NIL_UUID }, warnings: [] });
    const r = resolveNodeIdentity({ cluster_id: 'prod' }, fixed);
    expect(r.identity.clusterId).toBe(NIL_UUID);
    expect(r.warnings).toEqual([
      `node_identity.cluster_id = "prod" is not a UUID; using the nil UUID ${NIL_UUID}`,
    ]);
  });

  it('reports the @aenv/node version', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    expect(serverVersion()).toBe(pkg.version);
    expect(resolveNodeIdentity({}, fixed).identity.version).toBe(pkg.version);
  });
});

describe('systemHostname', () => {
  it('prefers $HOSTNAME, else the kernel host name', () => {
    expect(systemHostname({ HOSTNAME: ' box-7 ' })).toBe('box-7');
    const kernel = readFileSync('/proc/sys/kernel/hostname', 'utf8').trim();
    expect(systemHostname({})).toBe(kernel || 'unknown');
  });
});
