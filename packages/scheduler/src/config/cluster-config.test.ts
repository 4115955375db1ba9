import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { applyConfigDocument, defaultClusterConfig, resolveStrategy } from './cluster-config.js';
import { loadSchedulerConfig } from './load.js';

const dir = mkdtempSync(join(tmpdir(), 'aenv-scheduler-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

/** Loads `doc` as a config file with `env` as the whole environment. */
function load(doc: unknown, env: NodeJS.ProcessEnv = {}, queryOnly = false) {
  const path = join(dir, `c${n++}.json`);
  writeFileSync(path, typeof doc === 'string' ? doc : JSON.stringify(doc));
  return loadSchedulerConfig({ path, queryOnly, env });
}

const k8s = (kubernetes: Record<string, unknown>) => ({
  scheduler: {
    discovery: {
      mode: 'kubernetes',
      kubernetes: { namespace: 'aenv', service_name: 'nodes', port: 8000, ...kubernetes },
    },
  },
});

describe('scheduler config', () => {
  it('has the reference defaults without a file', () => {
    const c = loadSchedulerConfig({ queryOnly: false, env: {} });
    expect(c.logLevel).toBe('info');
    expect(c.logFormat).toBe('auto');
    expect(c.scheduler).toMatchObject({
      grpcListenAddr: ':9090',
      metricsListenAddr: ':9101',
      strategy: 'round_robin',
      reportTtlMs: 30_000,
      bindingTtlMs: 30_000,
      redisAddr: '',
      artifactStoreCapacity: 1_000_000,
      artifactLookupNodeLimit: 0,
      nodes: [{ id: 'local-node', endpoint: 'http://127.0.0.1:8000' }],
      discovery: { mode: 'static', kubernetes: { scheme: 'http' } },
    });
    expect(c.gateway).toMatchObject({
      httpListenAddr: ':8080',
      metricsListenAddr: ':9102',
      schedulerAddr: '127.0.0.1:9090',
      requestTimeoutMs: 30_000,
      forwardResponseSize: 4_194_304,
      sandboxProxyDomains: [],
      debugMode: false,
    });
  });

  it('reads the whole reference shape', () => {
    const c = load({
      log_level: 'debug',
      log_format: 'json',
      scheduler: {
        grpc_listen_addr: '0.0.0.0:7000',
        metrics_listen_addr: '[::1]:7001',
        strategy: 'random',
        report_ttl: '1m',
        binding_ttl: '45s',
        redis_addr: 'redis://127.0.0.1:6379/3',
        artifact_store_capacity: 10,
        artifact_lookup_node_limit: 2,
        nodes: [{ id: 'a', endpoint: 'http://10.0.0.1:8000' }],
        discovery: { mode: 'static', kubernetes: { scheme: 'https' } },
        node_resource_limit: {
          max_sandbox_count: 100,
          max_allocated_memory_bytes_including_paused: 2 ** 40,
          max_cpu_used_percent: null,
        },
      },
      gateway: {
        request_timeout: '10s',
        sandbox_proxy_domains: ['x.test'],
        debug_mode: true,
        query_only_scheduler_addr: 'q:9090',
      },
    });
    expect(c.scheduler).toMatchObject({
      grpcListenAddr: '0.0.0.0:7000',
      reportTtlMs: 60_000,
      bindingTtlMs: 45_000,
      strategy: 'random',
    });
    expect(c.scheduler.nodeResourceLimit).toEqual({
      maxSandboxCount: 100,
      maxAllocatedMemoryBytesIncludingPaused: 2 ** 40,
    });
    expect(c.gateway).toMatchObject({
      requestTimeoutMs: 10_000,
      debugMode: true,
      sandboxProxyDomains: ['x.test'],
    });
  });

  it.each([
    [
      { scheduler: { report_ttl: 30 } },
      'scheduler.report_ttl must be a duration string like "30s", got numeric value 30',
    ],
    [
      { scheduler: { binding_ttl: 30000 } },
      'scheduler.binding_ttl must be a duration string like "30s", got numeric value 30000',
    ],
    [
      { scheduler: { binding_ttl: '30' } },
      'scheduler.binding_ttl must be a duration string like "30s": invalid duration "30"',
    ],
    [{ scheduler: { report_ttl: '5days' } }, 'scheduler.report_ttl must be a duration string'],
    [{ scheduler: { report_ttl: '0s' } }, 'scheduler.report_ttl must be greater than zero'],
    [{ scheduler: { binding_ttl: '-1s' } }, 'scheduler.binding_ttl must be greater than zero'],
    [
      { gateway: { request_timeout: 30 } },
      'gateway.request_timeout must be a duration string like "30s", got numeric value 30',
    ],
  ])('refuses bad durations: %j', (doc, message) => {
    expect(() => load(doc)).toThrow(message);
  });

  it.each([
    [{ scheduler: { grpc_listen_addr: '9090' } }, 'scheduler.grpc_listen_addr "9090" must be "host:port"'],
    [{ scheduler: { grpc_listen_addr: 'localhost' } }, 'scheduler.grpc_listen_addr "localhost"'],
    [{ scheduler: { grpc_listen_addr: ':99999' } }, 'scheduler.grpc_listen_addr ":99999"'],
    [{ scheduler: { grpc_listen_addr: '[::1:9090' } }, 'scheduler.grpc_listen_addr'],
    [{ scheduler: { grpc_listen_addr: '[nothex]:9090' } }, 'scheduler.grpc_listen_addr'],
    [{ scheduler: { metrics_listen_addr: 'bad host:9101' } }, 'scheduler.metrics_listen_addr'],
    [
      { scheduler: { redis_addr: 'localhost' } },
      'scheduler.redis_addr "localhost" must be "host:port" or a redis:// URL',
    ],
    [{ scheduler: { redis_addr: 'http://127.0.0.1:6379' } }, 'must use redis:// or rediss://'],
    [{ scheduler: { redis_addr: 'redis://127.0.0.1:6379/db' } }, 'the path must be a database number'],
    [{ gateway: { http_listen_addr: '8080' } }, 'gateway.http_listen_addr'],
    [
      { scheduler: { nodes: [{ id: 'a', endpoint: 'ftp://x' }] } },
      'scheduler.nodes[0].endpoint "ftp://x" must be an http:// or https:// URL',
    ],
  ])('refuses bad addresses: %j', (doc, message) => {
    expect(() => load(doc)).toThrow(message);
  });

  it.each([
    [{ schedular: {} }, 'schedular is not a known key'],
    [{ scheduler: { stratgy: 'random' } }, 'scheduler.stratgy is not a known key'],
    [
      { scheduler: { node_resource_limit: { max_sandboxes: 1 } } },
      'scheduler.node_resource_limit.max_sandboxes is not a known key',
    ],
    [
      { scheduler: { node_resource_limit: { max_sandbox_count: -1 } } },
      'scheduler.node_resource_limit.max_sandbox_count must be an integer from 0',
    ],
    [{ scheduler: { node_resource_limit: { max_cpu_used_percent: 1.5 } } }, 'must be an integer'],
    [
      { scheduler: { artifact_store_capacity: 0 } },
      'scheduler.artifact_store_capacity must be an integer from 1',
    ],
    [{ scheduler: { nodes: 'a' } }, 'scheduler.nodes must be an array'],
    [{ scheduler: { nodes: [] } }, 'scheduler.nodes must not be empty'],
    [{ scheduler: { nodes: [{ id: 'a' }] } }, 'scheduler.nodes[0] requires id and endpoint'],
    [
      {
        scheduler: {
          nodes: [
            { id: 'a', endpoint: 'http://x' },
            { id: 'a', endpoint: 'http://y' },
          ],
        },
      },
      '"a" is listed twice',
    ],
    [
      { scheduler: { discovery: { mode: 'consul' } } },
      'scheduler.discovery.mode must be one of static, kubernetes',
    ],
    [{ log_format: 'text' }, 'log_format must be one of auto, console, json'],
    [{ log_level: 'verbose' }, 'log_level must be one of'],
    [{ gateway: { debug_mode: 'yes' } }, 'gateway.debug_mode must be true or false'],
    [
      { gateway: { sandbox_proxy_domains: 'x.test' } },
      'gateway.sandbox_proxy_domains must be an array of strings',
    ],
    ['[]', 'config must be an object'],
    ['{"scheduler": ', 'is not valid JSON'],
  ])('refuses %j', (doc, message) => {
    expect(() => load(doc)).toThrow(message);
  });

  it('checks kubernetes discovery settings and label selectors', () => {
    expect(
      load(
        k8s({
          ignore_pod_selector: 'aenv.io/ignore=true',
          no_schedule_pod_selector: 'tier in (a, b),!drain',
        }),
      ).scheduler.discovery.kubernetes,
    ).toMatchObject({
      serviceName: 'nodes',
      ignorePodSelector: 'aenv.io/ignore=true',
    });
    expect(() => load(k8s({ namespace: '' }))).toThrow(
      'scheduler.discovery.kubernetes.namespace is required',
    );
    expect(() => load(k8s({ service_name: '' }))).toThrow('service_name is required');
    expect(() => load(k8s({ port: 0 }))).toThrow('port must be greater than zero');
    expect(() => load(k8s({ port: 70000 }))).toThrow('port must be an integer from 0 to 65535');
    expect(() => load(k8s({ scheme: 'grpc' }))).toThrow('scheme must be http or https');
    expect(() => load(k8s({ ignore_pod_selector: 'a==' }))).not.toThrow();
    for (const bad of ['=x', 'a in (b', 'a b', 'k=v w', '-bad=1', 'a=(b)', 'a in b'])
      expect(() => load(k8s({ no_schedule_pod_selector: bad })), bad).toThrow(
        'no_schedule_pod_selector is invalid',
      );
  });

  it('lets the environment win over the file', () => {
    const c = load(
      { scheduler: { grpc_listen_addr: '127.0.0.1:1', strategy: 'random' } },
      {
        SCHEDULER_GRPC_LISTEN_ADDR: '127.0.0.1:2',
        SCHEDULER_STRATEGY: 'least_allocated',
        SCHEDULER_REDIS_ADDR: '127.0.0.1:6379',
        SCHEDULER_BINDING_TTL: '1m',
        LOG_LEVEL: 'warn',
        LOG_FORMAT: 'console',
        SCHEDULER_METRICS_LISTEN_ADDR: ' ',
      },
    );
    expect(c.scheduler).toMatchObject({
      grpcListenAddr: '127.0.0.1:2',
      strategy: 'least_allocated',
      redisAddr: '127.0.0.1:6379',
      bindingTtlMs: 60_000,
      metricsListenAddr: ':9101',
    });
    expect([c.logLevel, c.logFormat]).toEqual(['warn', 'console']);
    expect(() => load({}, { SCHEDULER_GRPC_LISTEN_ADDR: 'nowhere' })).toThrow(
      'scheduler.grpc_listen_addr "nowhere"',
    );
    expect(() => load({}, { SCHEDULER_BINDING_TTL: '30' })).toThrow('invalid SCHEDULER_BINDING_TTL "30"');
    expect(() => load({}, { SCHEDULER_ARTIFACT_STORE_CAPACITY: 'many' })).toThrow(
      'invalid SCHEDULER_ARTIFACT_STORE_CAPACITY',
    );
  });

  it('needs Redis for --query-only, and then skips discovery checks', () => {
    expect(() => load({}, {}, true)).toThrow('scheduler.redis_addr is required by --query-only');
    expect(
      load({ scheduler: { redis_addr: '127.0.0.1:6379', nodes: [] } }, {}, true).scheduler.redisAddr,
    ).toBe('127.0.0.1:6379');
  });

  it('falls back to round_robin for an unknown strategy name, as the reference', () => {
    expect(resolveStrategy('least_allocated')).toEqual({ strategy: 'least_allocated', fellBack: false });
    expect(resolveStrategy('RANDOM')).toEqual({ strategy: 'random', fellBack: false });
    expect(resolveStrategy('least_loaded')).toEqual({ strategy: 'round_robin', fellBack: true });
    expect(resolveStrategy('')).toEqual({ strategy: 'round_robin', fellBack: false });
    expect(load({ scheduler: { strategy: 'bin_packing' } }).scheduler.strategy).toBe('bin_packing');
  });

  it('keeps defaults for keys the file leaves out', () => {
    const c = defaultClusterConfig();
    applyConfigDocument(c, { scheduler: { strategy: 'random' } });
    expect(c.scheduler.reportTtlMs).toBe(30_000);
    expect(c.scheduler.nodes).toHaveLength(1);
  });
});
