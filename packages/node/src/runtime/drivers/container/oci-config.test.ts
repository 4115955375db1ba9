import { describe, expect, it } from 'vitest';
import { buildOciConfig, DEFAULT_CAPABILITIES, MASKED_PATHS, sandboxCapabilities } from './oci-config.js';
import { builtinProfile } from './seccomp.js';

type AnyJson = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

function config(overrides: Partial<Parameters<typeof buildOciConfig>[0]> = {}): AnyJson {
  return buildOciConfig({
    hostname: 'sb-1',
    rootfsDir: '/h/sandboxes/sb-1/rootfs',
    uidMapHostStart: 100000,
    uidMapSize: 65536,
    seccomp: builtinProfile({ nestedContainers: false }, 'x64'),
    capabilities: sandboxCapabilities(false),
    noNewPrivileges: false,
    env: { FOO: 'bar', PATH: '/custom/bin' },
    toolsDir: '/deps/tools/v1',
    sysfsDir: '/h/sandboxes/sb-1/sys',
    netnsPath: '/run/aenv/netns/aenv-ns-3',
    cgroupsPath: '/aenv/sb-1',
    resources: { cpuCount: 1.5, memoryMB: 512, pidsLimit: 256 },
    swapAccounting: true,
    criuConfigPath: '/run/aenv/criu/runc.conf',
    nofileLimit: 20000,
    ...overrides,
  }) as AnyJson;
}

describe('buildOciConfig', () => {
  it('bind-mounts volumes read-write, nosuid and nodev', () => {
    const c = config({ volumeMounts: [{ source: '/h/sandboxes/sb-1/v/0', destination: '/mnt/data' }] });
    expect(c.mounts).toContainEqual({
      destination: '/mnt/data',
      type: 'bind',
      source: '/h/sandboxes/sb-1/v/0',
      options: ['rbind', 'nosuid', 'nodev'],
    });
  });

  it('runs aenv-init as container root with the env given', () => {
    const c = config();
    expect(c.process.args).toEqual(['/agentenv/bin/aenv-init']);
    expect(c.process.user).toEqual({ uid: 0, gid: 0 });
    expect(c.process.env).toContain('FOO=bar');
    expect(c.process.env).toContain('PATH=/custom/bin');
    expect(c.process.env).toContain('HOME=/root');
    expect(c.process.terminal).toBe(false);
    expect(c.hostname).toBe('sb-1');
    expect(c.root).toEqual({ path: '/h/sandboxes/sb-1/rootfs', readonly: false });
  });

  it("gives Docker's default capabilities without NET_RAW, none inheritable, and keeps setuid working", () => {
    const caps = config().process.capabilities;
    for (const set of ['bounding', 'effective', 'permitted'])
      expect(caps[set]).toEqual([...DEFAULT_CAPABILITIES]);
    expect(caps.inheritable).toEqual([]);
    expect(caps.ambient).toEqual([]);
    for (const cap of ['CAP_SYS_ADMIN', 'CAP_SYS_PTRACE', 'CAP_NET_RAW', 'CAP_SYS_RESOURCE'])
      expect(DEFAULT_CAPABILITIES).not.toContain(cap);
    expect(config().process.noNewPrivileges).toBe(false);
    expect(config({ noNewPrivileges: true }).process.noNewPrivileges).toBe(true);
    const withRaw = config({ capabilities: sandboxCapabilities(true) }).process.capabilities;
    expect(withRaw.bounding).toContain('CAP_NET_RAW');
  });

  it('maps container root to the host uid range and joins the given netns', () => {
    const linux = config().linux;
    expect(linux.uidMappings).toEqual([{ containerID: 0, hostID: 100000, size: 65536 }]);
    expect(linux.gidMappings).toEqual(linux.uidMappings);
    const types = linux.namespaces.map((n: AnyJson) => n.type).sort();
    expect(types).toEqual(['cgroup', 'ipc', 'mount', 'network', 'pid', 'user', 'uts']);
    expect(linux.namespaces.find((n: AnyJson) => n.type === 'network').path).toBe(
      '/run/aenv/netns/aenv-ns-3',
    );
    expect(linux.cgroupsPath).toBe('/aenv/sb-1');
  });

  it('turns cpuCount, memoryMB and pidsLimit into cgroup limits', () => {
    const r = config().linux.resources;
    expect(r.cpu).toEqual({ quota: 150000, period: 100000, shares: 1536 });
    expect(r.memory).toEqual({ limit: 512 * 1024 * 1024, swap: 512 * 1024 * 1024, disableOOMKiller: false });
    expect(r.pids).toEqual({ limit: 256 });
    expect(r.devices).toEqual([{ allow: false, access: 'rwm' }]);
    expect(config({ swapAccounting: false }).linux.resources.memory.swap).toBeUndefined();
  });

  it('mounts the tools dir read-only, nosuid, nodev and the netns sysfs read-only; no host devices', () => {
    const c = config();
    const byDest = new Map<string, AnyJson>(c.mounts.map((m: AnyJson) => [m.destination, m]));
    expect(byDest.get('/agentenv')).toEqual({
      destination: '/agentenv',
      type: 'bind',
      source: '/deps/tools/v1',
      options: ['rbind', 'ro', 'nosuid', 'nodev'],
    });
    expect(byDest.get('/sys')?.source).toBe('/h/sandboxes/sb-1/sys');
    expect(byDest.get('/sys')?.options).toContain('ro');
    expect(byDest.has('/tmp')).toBe(false); // /tmp is part of the overlay so it survives a pause
    expect(byDest.has('/etc/hosts')).toBe(false); // written into the upper, not bind-mounted
    expect(byDest.get('/dev/shm')?.options).toContain(`size=${256 * 1024 * 1024}`);
    expect(c.linux.devices).toEqual([]);
    for (const m of c.mounts) expect(m.source).not.toMatch(/^\/dev\//);
  });

  it('masks kernel files like Docker and hands CRIU its config through the annotation', () => {
    const c = config();
    expect(c.linux.maskedPaths).toEqual(MASKED_PATHS);
    for (const p of ['/proc/kcore', '/proc/keys', '/sys/firmware', '/proc/timer_list']) {
      expect(c.linux.maskedPaths).toContain(p);
    }
    expect(c.linux.readonlyPaths).toContain('/proc/sys');
    expect(c.linux.readonlyPaths).toContain('/proc/sysrq-trigger');
    expect(c.annotations).toEqual({ 'org.criu.config': '/run/aenv/criu/runc.conf' });
    expect(config({ criuConfigPath: null }).annotations).toEqual({});
    expect(c.linux.seccomp.defaultAction).toBe('SCMP_ACT_ERRNO');
    expect(() => config({ seccomp: null as never })).toThrow(/seccomp/);
  });

  it('limits open files and turns core dumps off', () => {
    expect(config().process.rlimits).toEqual([
      { type: 'RLIMIT_NOFILE', hard: 20000, soft: 20000 },
      { type: 'RLIMIT_CORE', hard: 0, soft: 0 },
    ]);
  });
});
