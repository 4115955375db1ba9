// The Compose deployment (deploy/docker-compose.yml) and every cluster config JSON shipped in deploy/:
// the JSON has the shape of the reference's config (docs/cluster.md#configuration: known keys only, durations
// as strings), the compose file wires what the configs name (node ids, service names, ports), nothing is
// built or pulled from a registry, the nodes share one repository and one secrets volume, sandboxes'
// network has no way out, and the node config loads.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '@aenv/config';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');
const read = (p: string) => readFileSync(join(REPO, p), 'utf8');

// ---- the reference's config JSON (docs/cluster.md#configuration) ------------------------------------------

type Shape = 'string' | 'duration' | 'integer' | 'boolean' | 'strings' | Shape[] | { [key: string]: Shape };
const NODE_LIMIT = Object.fromEntries(
  [
    'max_sandbox_count',
    'max_sandbox_starting_count',
    'max_cpu_used_percent',
    'max_cpu_allocated_percent',
    'max_memory_used_percent',
    'max_memory_allocated_percent',
    'max_sandbox_count_including_paused',
    'max_allocated_cpu_including_paused',
    'max_allocated_memory_bytes_including_paused',
  ].map((k) => [k, 'integer' as Shape]),
);
const CONFIG_SHAPE: Shape = {
  log_level: 'string',
  log_format: 'string',
  scheduler: {
    grpc_listen_addr: 'string',
    metrics_listen_addr: 'string',
    strategy: 'string',
    report_ttl: 'duration',
    binding_ttl: 'duration',
    redis_addr: 'string',
    artifact_store_capacity: 'integer',
    artifact_lookup_node_limit: 'integer',
    nodes: [{ id: 'string', endpoint: 'string' }],
    discovery: {
      mode: 'string',
      kubernetes: {
        namespace: 'string',
        service_name: 'string',
        port: 'integer',
        scheme: 'string',
        ignore_pod_selector: 'string',
        no_schedule_pod_selector: 'string',
      },
    },
    node_resource_limit: NODE_LIMIT,
  },
  gateway: {
    http_listen_addr: 'string',
    metrics_listen_addr: 'string',
    scheduler_addr: 'string',
    query_only_scheduler_addr: 'string',
    request_timeout: 'duration',
    forward_response_size: 'integer',
    sandbox_proxy_domains: 'strings',
    debug_mode: 'boolean',
  },
};

/** Problems of `value` against `shape`, each naming the key path. */
function shapeProblems(value: unknown, shape: Shape, path = ''): string[] {
  if (shape === 'duration')
    return typeof value === 'string' && /^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/.test(value)
      ? []
      : [`${path} must be a duration string like "30s", got ${JSON.stringify(value)}`];
  if (shape === 'integer') return Number.isInteger(value) ? [] : [`${path} must be an integer`];
  if (shape === 'string' || shape === 'boolean')
    return typeof value === shape ? [] : [`${path} must be a ${shape}`];
  if (shape === 'strings')
    return Array.isArray(value) && value.every((v) => typeof v === 'string')
      ? []
      : [`${path} must be strings`];
  if (Array.isArray(shape)) {
    if (!Array.isArray(value)) return [`${path} must be an array`];
    return value.flatMap((v, i) => shapeProblems(v, shape[0]!, `${path}[${i}]`));
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return [`${path} must be an object`];
  return Object.entries(value).flatMap(([k, v]) =>
    k in shape
      ? shapeProblems(v, shape[k]!, path ? `${path}.${k}` : k)
      : [`${path ? `${path}.` : ''}${k} is not a cluster config key`],
  );
}

const CONFIGS = [
  'deploy/docker/config/default.json',
  'deploy/k8s/base/config/scheduler.json',
  'deploy/k8s/base/config/gateway.json',
];

describe('cluster config JSON', () => {
  it.each(CONFIGS)('%s has the reference shape: known keys, string durations', (file) => {
    expect(shapeProblems(JSON.parse(read(file)), CONFIG_SHAPE)).toEqual([]);
  });

  it('the shape check bites: an unknown key and a numeric duration are reported', () => {
    const doc = JSON.parse(read(CONFIGS[0]!));
    doc.scheduler.report_ttl = 30;
    doc.gateway.request_timout = '30s';
    expect(shapeProblems(doc, CONFIG_SHAPE)).toEqual([
      'scheduler.report_ttl must be a duration string like "30s", got 30',
      'gateway.request_timout is not a cluster config key',
    ]);
  });
});

// ---- the compose file ------------------------------------------------------------------------------------

interface Service {
  image: string;
  build?: unknown;
  command?: string[];
  entrypoint?: string[] | string;
  privileged?: boolean;
  environment?: Record<string, string>;
  volumes?: string[];
  tmpfs?: string[];
  ports?: string[];
  networks?: string[];
  network_mode?: string;
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: unknown;
}
interface ComposeFile {
  services: Record<string, Service>;
  networks: Record<
    string,
    { internal?: boolean; driver_opts?: Record<string, string>; ipam?: { config: { subnet: string }[] } }
  >;
  volumes: Record<string, unknown>;
}

const compose = parse(read('deploy/docker-compose.yml'), { merge: true }) as ComposeFile;
const defaults = JSON.parse(read('deploy/docker/config/default.json'));
const nodeServices = Object.entries(compose.services).filter(([, s]) => s.command?.[0] === 'server');

describe('deploy/docker-compose.yml', () => {
  it('runs Redis, a scheduler, a gateway and two nodes from the local images, building and pulling nothing', () => {
    const roles = Object.values(compose.services).map((s) => s.command?.[0] ?? s.entrypoint?.[2] ?? '');
    expect(roles).toEqual(expect.arrayContaining(['scheduler', 'gateway', 'server', 'redis-server']));
    expect(nodeServices.map(([name]) => name)).toEqual(['agentenv-a', 'agentenv-b']);
    for (const [name, s] of Object.entries(compose.services)) {
      expect(s.build, name).toBeUndefined();
      expect(s.image, name).toMatch(/^aenv\/aenv(-node)?:\$\{AENV_IMAGE_TAG:-local\}$/);
    }
  });

  it('the scheduler knows each node by the id the node reports, at its service name and port', () => {
    expect(defaults.scheduler.discovery.mode).toBe('static');
    const ids = nodeServices.map(([name, s]) => {
      expect(s.environment?.AENV_NODE_ID).toBe(name);
      return { id: name, endpoint: `http://${name}:8000` };
    });
    expect(defaults.scheduler.nodes).toEqual(ids);
    const [redisHost] = defaults.scheduler.redis_addr.split(':');
    expect(compose.services[redisHost]).toBeDefined();
    const [schedHost, schedPort] = defaults.gateway.scheduler_addr.split(':');
    expect(compose.services[schedHost]?.command?.[0]).toBe('scheduler');
    expect(defaults.scheduler.grpc_listen_addr).toBe(`:${schedPort}`);
  });

  it('nodes: privileged, distinct resource prefixes, one shared repository and secrets volume, own homes', () => {
    const prefixes = new Set<string>();
    for (const [name, s] of nodeServices) {
      expect(s.privileged, name).toBe(true);
      prefixes.add(s.environment!.AENV_RESOURCE_PREFIX!);
      expect(s.volumes).toEqual(
        expect.arrayContaining([
          'agentenv-snapshot-store:/var/lib/aenv-shared',
          'agentenv-auth:/run/secrets:ro',
          `${name}-home:/var/lib/aenv`,
          '/sys/fs/cgroup:/sys/fs/cgroup',
        ]),
      );
      expect(s.depends_on?.secrets?.condition).toBe('service_completed_successfully');
      // The node runs the uid mapping helper it compiles into /run/aenv: Docker's tmpfs default is noexec.
      expect(s.tmpfs, name).toContainEqual(expect.stringMatching(/^\/run\/aenv:(.*,)?exec(,|$)/));
    }
    expect(prefixes.size).toBe(nodeServices.length);
    // `scripts/cluster-compose.sh down` removes the nodes' parent cgroups in the host's tree by these names.
    const script = read('scripts/cluster-compose.sh');
    expect(/^NODE_PREFIXES=\(([^)]*)\)$/m.exec(script)?.[1]?.split(' ')).toEqual([...prefixes]);
    expect(Object.keys(compose.volumes)).toEqual(
      expect.arrayContaining([
        'agentenv-auth',
        'agentenv-snapshot-store',
        'agentenv-a-home',
        'agentenv-b-home',
      ]),
    );
  });

  it('the gateway is published on host loopback 8000 -> 8080 and reads the shared API key', () => {
    const gw = compose.services.gateway!;
    expect(gw.ports).toEqual(['127.0.0.1:${AENV_GATEWAY_PORT:-8000}:8080']);
    expect(defaults.gateway.http_listen_addr).toBe(':8080');
    expect(gw.volumes).toContain('agentenv-auth:/run/secrets:ro');
  });

  it('sandbox traffic has no way out: nodes, scheduler and Redis are on an internal network only', () => {
    expect(compose.networks.cluster?.internal).toBe(true);
    // scripts/cluster-compose.sh turns forwarding off on these bridges by name.
    const script = read('scripts/cluster-compose.sh');
    const bridges = /^BRIDGES=\(([^)]*)\)$/m.exec(script)![1]!.split(' ');
    expect(
      Object.values(compose.networks).map((n) => n.driver_opts?.['com.docker.network.bridge.name']),
    ).toEqual(bridges);
    for (const [name, s] of Object.entries(compose.services)) {
      if (name === 'gateway') continue;
      if (s.network_mode) expect(s.network_mode, name).toBe('none');
      else expect(s.networks, name).toEqual(['cluster']);
    }
    expect(compose.services.gateway!.networks).toEqual(['cluster', 'edge']);
  });

  it('the node config loads without a warning and names the scheduler service', () => {
    const dir = mkdtempSync(join(tmpdir(), 'aenv-compose-'));
    try {
      const file = join(dir, 'node.toml');
      writeFileSync(file, read('deploy/docker/config/node.toml'));
      const env = nodeServices[0]![1].environment!;
      const { config, warnings } = loadConfig({ configPath: file, env });
      expect(warnings).toEqual([]);
      expect(config.resource_prefix).toBe(env.AENV_RESOURCE_PREFIX);
      expect(config.backend.posix_fs.snapshot_store).toMatch(/^\/var\/lib\/aenv-shared\//);
      expect(new URL(config.cluster.scheduler_endpoint!).host).toBe(defaults.gateway.scheduler_addr);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('docker-compose accepts the file (when docker-compose is installed)', () => {
    const r = spawnSync(
      'docker-compose',
      ['-f', join(REPO, 'deploy', 'docker-compose.yml'), 'config', '-q'],
      {
        encoding: 'utf8',
      },
    );
    if (r.error) return expect((r.error as NodeJS.ErrnoException).code).toBe('ENOENT');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });
});
