// The JSON config file shared by `aenv scheduler` and `aenv gateway`, in the reference's shape
// (docs/cluster.md#configuration). Every key is checked: an unknown key, a wrong type or a duration
// given as a number stops startup with the key's path in the message.
import { parseGoDuration } from './duration.js';
import { checkLabelSelector } from './label-selector.js';
import { parseListenAddress } from './listen-address.js';

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;
export const LOG_FORMATS = ['auto', 'console', 'json'] as const;
export const STRATEGIES = ['round_robin', 'random', 'least_allocated'] as const;
export type StrategyName = (typeof STRATEGIES)[number];

export interface StaticNode {
  id: string;
  endpoint: string;
}

export interface KubernetesDiscoveryConfig {
  namespace: string;
  serviceName: string;
  port: number;
  scheme: string;
  ignorePodSelector: string;
  noSchedulePodSelector: string;
}

/** Per-node ceilings; an absent key imposes none. Allocated percentages may exceed 100 (overcommit). */
export interface NodeResourceLimit {
  maxSandboxCount?: number;
  maxSandboxStartingCount?: number;
  maxCpuUsedPercent?: number;
  maxCpuAllocatedPercent?: number;
  maxMemoryUsedPercent?: number;
  maxMemoryAllocatedPercent?: number;
  maxSandboxCountIncludingPaused?: number;
  maxAllocatedCpuIncludingPaused?: number;
  maxAllocatedMemoryBytesIncludingPaused?: number;
}

export interface SchedulerSection {
  grpcListenAddr: string;
  metricsListenAddr: string;
  /** As configured; {@link resolveStrategy} maps unknown names to round_robin. */
  strategy: string;
  reportTtlMs: number;
  bindingTtlMs: number;
  redisAddr: string;
  artifactStoreCapacity: number;
  artifactLookupNodeLimit: number;
  nodes: StaticNode[];
  discovery: { mode: string; kubernetes: KubernetesDiscoveryConfig };
  nodeResourceLimit: NodeResourceLimit | undefined;
}

export interface GatewaySection {
  httpListenAddr: string;
  metricsListenAddr: string;
  schedulerAddr: string;
  queryOnlySchedulerAddr: string;
  requestTimeoutMs: number;
  forwardResponseSize: number;
  sandboxProxyDomains: string[];
  debugMode: boolean;
}

export interface ClusterConfig {
  logLevel: string;
  logFormat: string;
  scheduler: SchedulerSection;
  gateway: GatewaySection;
}

export class ClusterConfigError extends Error {
  override name = 'ClusterConfigError';
}

/** The defaults, the reference's (docs/cluster.md#configuration). */
export function defaultClusterConfig(): ClusterConfig {
  return {
    logLevel: 'info',
    logFormat: 'auto',
    scheduler: {
      grpcListenAddr: ':9090',
      metricsListenAddr: ':9101',
      strategy: 'round_robin',
      reportTtlMs: 30_000,
      bindingTtlMs: 30_000,
      redisAddr: '',
      artifactStoreCapacity: 1_000_000,
      artifactLookupNodeLimit: 0,
      nodes: [{ id: 'local-node', endpoint: 'http://127.0.0.1:8000' }],
      discovery: {
        mode: 'static',
        kubernetes: {
          namespace: '',
          serviceName: '',
          port: 0,
          scheme: 'http',
          ignorePodSelector: '',
          noSchedulePodSelector: '',
        },
      },
      nodeResourceLimit: undefined,
    },
    gateway: {
      httpListenAddr: ':8080',
      metricsListenAddr: ':9102',
      schedulerAddr: '127.0.0.1:9090',
      queryOnlySchedulerAddr: '',
      requestTimeoutMs: 30_000,
      forwardResponseSize: 4 * 1024 * 1024,
      sandboxProxyDomains: [],
      debugMode: false,
    },
  };
}

// ---- reading the JSON document --------------------------------------------------------------------

type Json = unknown;

function fail(path: string, message: string): never {
  throw new ClusterConfigError(`${path} ${message}`);
}

function describe(value: Json): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'number') return `numeric value ${value}`;
  return `a ${typeof value}`;
}

function object(value: Json, path: string, keys: readonly string[]): Record<string, Json> {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    fail(path, `must be an object, got ${describe(value)}`);
  const record = value as Record<string, Json>;
  for (const key of Object.keys(record)) {
    if (!keys.includes(key))
      fail(`${path}.${key}`.replace(/^\./, ''), `is not a known key (known: ${keys.join(', ')})`);
  }
  return record;
}

function string(value: Json, path: string): string {
  if (typeof value !== 'string') fail(path, `must be a string, got ${describe(value)}`);
  return value;
}

function boolean(value: Json, path: string): boolean {
  if (typeof value !== 'boolean') fail(path, `must be true or false, got ${describe(value)}`);
  return value;
}

function integer(value: Json, path: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
    fail(
      path,
      `must be an integer from ${min} to ${max}, got ${typeof value === 'number' ? value : describe(value)}`,
    );
  return value;
}

function duration(value: Json, path: string): number {
  if (typeof value !== 'string') fail(path, `must be a duration string like "30s", got ${describe(value)}`);
  try {
    return parseGoDuration(value);
  } catch (e) {
    fail(path, `must be a duration string like "30s": ${(e as Error).message}`);
  }
}

function stringList(value: Json, path: string): string[] {
  if (!Array.isArray(value)) fail(path, `must be an array of strings, got ${describe(value)}`);
  return value.map((v, i) => string(v, `${path}[${i}]`));
}

const UINT32_MAX = 4_294_967_295;

const LIMIT_KEYS: Record<keyof NodeResourceLimit, [string, number]> = {
  maxSandboxCount: ['max_sandbox_count', UINT32_MAX],
  maxSandboxStartingCount: ['max_sandbox_starting_count', UINT32_MAX],
  maxCpuUsedPercent: ['max_cpu_used_percent', UINT32_MAX],
  maxCpuAllocatedPercent: ['max_cpu_allocated_percent', UINT32_MAX],
  maxMemoryUsedPercent: ['max_memory_used_percent', UINT32_MAX],
  maxMemoryAllocatedPercent: ['max_memory_allocated_percent', UINT32_MAX],
  maxSandboxCountIncludingPaused: ['max_sandbox_count_including_paused', UINT32_MAX],
  maxAllocatedCpuIncludingPaused: ['max_allocated_cpu_including_paused', UINT32_MAX],
  maxAllocatedMemoryBytesIncludingPaused: [
    'max_allocated_memory_bytes_including_paused',
    Number.MAX_SAFE_INTEGER,
  ],
};

function readResourceLimit(value: Json, path: string): NodeResourceLimit | undefined {
  if (value === null) return undefined;
  const fields = Object.values(LIMIT_KEYS).map(([k]) => k);
  const raw = object(value, path, fields);
  const limit: NodeResourceLimit = {};
  for (const [prop, [key, max]] of Object.entries(LIMIT_KEYS) as [
    keyof NodeResourceLimit,
    [string, number],
  ][]) {
    // null = no limit, as an absent key (the reference's pointers).
    if (raw[key] !== undefined && raw[key] !== null)
      limit[prop] = integer(raw[key], `${path}.${key}`, 0, max);
  }
  return limit;
}

function readScheduler(value: Json, into: SchedulerSection): void {
  const raw = object(value, 'scheduler', [
    'grpc_listen_addr',
    'metrics_listen_addr',
    'strategy',
    'report_ttl',
    'binding_ttl',
    'redis_addr',
    'artifact_store_capacity',
    'artifact_lookup_node_limit',
    'nodes',
    'discovery',
    'node_resource_limit',
  ]);
  const p = (k: string) => `scheduler.${k}`;
  if (raw.grpc_listen_addr !== undefined)
    into.grpcListenAddr = string(raw.grpc_listen_addr, p('grpc_listen_addr'));
  if (raw.metrics_listen_addr !== undefined)
    into.metricsListenAddr = string(raw.metrics_listen_addr, p('metrics_listen_addr'));
  if (raw.strategy !== undefined) into.strategy = string(raw.strategy, p('strategy'));
  if (raw.report_ttl !== undefined) into.reportTtlMs = duration(raw.report_ttl, p('report_ttl'));
  if (raw.binding_ttl !== undefined) into.bindingTtlMs = duration(raw.binding_ttl, p('binding_ttl'));
  if (raw.redis_addr !== undefined) into.redisAddr = string(raw.redis_addr, p('redis_addr'));
  if (raw.artifact_store_capacity !== undefined)
    into.artifactStoreCapacity = integer(raw.artifact_store_capacity, p('artifact_store_capacity'), 1);
  if (raw.artifact_lookup_node_limit !== undefined)
    into.artifactLookupNodeLimit = integer(
      raw.artifact_lookup_node_limit,
      p('artifact_lookup_node_limit'),
      0,
    );
  if (raw.nodes !== undefined) {
    if (!Array.isArray(raw.nodes)) fail(p('nodes'), `must be an array, got ${describe(raw.nodes)}`);
    into.nodes = raw.nodes.map((n: Json, i: number) => {
      const node = object(n, `${p('nodes')}[${i}]`, ['id', 'endpoint']);
      return {
        id: string(node.id ?? '', `${p('nodes')}[${i}].id`).trim(),
        endpoint: string(node.endpoint ?? '', `${p('nodes')}[${i}].endpoint`).trim(),
      };
    });
  }
  if (raw.discovery !== undefined) {
    const d = object(raw.discovery, p('discovery'), ['mode', 'kubernetes']);
    if (d.mode !== undefined) into.discovery.mode = string(d.mode, p('discovery.mode'));
    if (d.kubernetes !== undefined) {
      const kp = p('discovery.kubernetes');
      const k = object(d.kubernetes, kp, [
        'namespace',
        'service_name',
        'port',
        'scheme',
        'ignore_pod_selector',
        'no_schedule_pod_selector',
      ]);
      const kube = into.discovery.kubernetes;
      if (k.namespace !== undefined) kube.namespace = string(k.namespace, `${kp}.namespace`);
      if (k.service_name !== undefined) kube.serviceName = string(k.service_name, `${kp}.service_name`);
      if (k.port !== undefined) kube.port = integer(k.port, `${kp}.port`, 0, 65535);
      if (k.scheme !== undefined) kube.scheme = string(k.scheme, `${kp}.scheme`);
      if (k.ignore_pod_selector !== undefined)
        kube.ignorePodSelector = string(k.ignore_pod_selector, `${kp}.ignore_pod_selector`);
      if (k.no_schedule_pod_selector !== undefined)
        kube.noSchedulePodSelector = string(k.no_schedule_pod_selector, `${kp}.no_schedule_pod_selector`);
    }
  }
  if (raw.node_resource_limit !== undefined)
    into.nodeResourceLimit = readResourceLimit(raw.node_resource_limit, p('node_resource_limit'));
}

function readGateway(value: Json, into: GatewaySection): void {
  const raw = object(value, 'gateway', [
    'http_listen_addr',
    'metrics_listen_addr',
    'scheduler_addr',
    'query_only_scheduler_addr',
    'request_timeout',
    'forward_response_size',
    'sandbox_proxy_domains',
    'debug_mode',
  ]);
  const p = (k: string) => `gateway.${k}`;
  if (raw.http_listen_addr !== undefined)
    into.httpListenAddr = string(raw.http_listen_addr, p('http_listen_addr'));
  if (raw.metrics_listen_addr !== undefined)
    into.metricsListenAddr = string(raw.metrics_listen_addr, p('metrics_listen_addr'));
  if (raw.scheduler_addr !== undefined) into.schedulerAddr = string(raw.scheduler_addr, p('scheduler_addr'));
  if (raw.query_only_scheduler_addr !== undefined)
    into.queryOnlySchedulerAddr = string(raw.query_only_scheduler_addr, p('query_only_scheduler_addr'));
  if (raw.request_timeout !== undefined)
    into.requestTimeoutMs = duration(raw.request_timeout, p('request_timeout'));
  if (raw.forward_response_size !== undefined)
    into.forwardResponseSize = integer(raw.forward_response_size, p('forward_response_size'), 1);
  if (raw.sandbox_proxy_domains !== undefined)
    into.sandboxProxyDomains = stringList(raw.sandbox_proxy_domains, p('sandbox_proxy_domains'));
  if (raw.debug_mode !== undefined) into.debugMode = boolean(raw.debug_mode, p('debug_mode'));
}

/** Applies a parsed JSON document onto `config` (defaults first, so absent keys keep them). */
export function applyConfigDocument(config: ClusterConfig, doc: Json): void {
  const raw = object(doc, 'config', ['log_level', 'log_format', 'scheduler', 'gateway']);
  if (raw.log_level !== undefined) config.logLevel = string(raw.log_level, 'log_level');
  if (raw.log_format !== undefined) config.logFormat = string(raw.log_format, 'log_format');
  if (raw.scheduler !== undefined) readScheduler(raw.scheduler, config.scheduler);
  if (raw.gateway !== undefined) readGateway(raw.gateway, config.gateway);
}

// ---- environment -----------------------------------------------------------------------------------

function envDuration(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const v = env[name]?.trim();
  if (!v) return undefined;
  try {
    return parseGoDuration(v);
  } catch (e) {
    throw new ClusterConfigError(`invalid ${name} ${JSON.stringify(v)}: ${(e as Error).message}`);
  }
}

function envInteger(env: NodeJS.ProcessEnv, name: string, min: number): number | undefined {
  const v = env[name]?.trim();
  if (!v) return undefined;
  if (!/^-?\d+$/.test(v) || Number(v) < min)
    throw new ClusterConfigError(`invalid ${name} ${JSON.stringify(v)}: must be an integer >= ${min}`);
  return Number(v);
}

/** The reference's environment overrides (they win over the file); empty values are ignored, as there. */
export function applyEnvironment(config: ClusterConfig, env: NodeJS.ProcessEnv): void {
  const set = (name: string, apply: (v: string) => void) => {
    const v = env[name]?.trim();
    if (v) apply(v);
  };
  set('LOG_LEVEL', (v) => (config.logLevel = v));
  set('LOG_FORMAT', (v) => (config.logFormat = v));
  const s = config.scheduler;
  set('SCHEDULER_GRPC_LISTEN_ADDR', (v) => (s.grpcListenAddr = v));
  set('SCHEDULER_METRICS_LISTEN_ADDR', (v) => (s.metricsListenAddr = v));
  set('SCHEDULER_STRATEGY', (v) => (s.strategy = v));
  set('SCHEDULER_REDIS_ADDR', (v) => (s.redisAddr = v));
  s.bindingTtlMs = envDuration(env, 'SCHEDULER_BINDING_TTL') ?? s.bindingTtlMs;
  s.artifactStoreCapacity =
    envInteger(env, 'SCHEDULER_ARTIFACT_STORE_CAPACITY', 1) ?? s.artifactStoreCapacity;
  s.artifactLookupNodeLimit =
    envInteger(env, 'SCHEDULER_ARTIFACT_LOOKUP_NODE_LIMIT', 0) ?? s.artifactLookupNodeLimit;
  const g = config.gateway;
  set('GATEWAY_HTTP_LISTEN_ADDR', (v) => (g.httpListenAddr = v));
  set('GATEWAY_METRICS_LISTEN_ADDR', (v) => (g.metricsListenAddr = v));
  set('GATEWAY_SCHEDULER_ADDR', (v) => (g.schedulerAddr = v));
  set('GATEWAY_QUERY_ONLY_SCHEDULER_ADDR', (v) => (g.queryOnlySchedulerAddr = v));
  set(
    'GATEWAY_SANDBOX_PROXY_DOMAINS',
    (v) =>
      (g.sandboxProxyDomains = v
        .split(',')
        .map((d) => d.trim())
        .filter(Boolean)),
  );
  g.requestTimeoutMs = envDuration(env, 'GATEWAY_REQUEST_TIMEOUT') ?? g.requestTimeoutMs;
  set('GATEWAY_DEBUG_MODE', (v) => {
    const b = { true: true, '1': true, false: false, '0': false }[v.toLowerCase()];
    if (b === undefined)
      throw new ClusterConfigError(`invalid GATEWAY_DEBUG_MODE ${JSON.stringify(v)}: must be true or false`);
    g.debugMode = b;
  });
}

// ---- validation --------------------------------------------------------------------------------------

function isHttpUrl(value: string): boolean {
  try {
    const u = new URL(value);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '';
  } catch {
    return false;
  }
}

function checkListen(value: string, path: string): void {
  try {
    parseListenAddress(value);
  } catch (e) {
    fail(path, `${JSON.stringify(value)} ${(e as Error).message}`);
  }
}

/** `host:port` or a redis:// / rediss:// URL, as the reference's store accepts. */
export function checkRedisAddress(value: string, path: string): void {
  if (value.includes('://')) {
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      fail(path, `${JSON.stringify(value)} is not a valid URL`);
    }
    if (url.protocol !== 'redis:' && url.protocol !== 'rediss:')
      fail(path, `${JSON.stringify(value)} must use redis:// or rediss://`);
    if (url.hostname === '') fail(path, `${JSON.stringify(value)} has no host`);
    const db = url.pathname.replace(/^\//, '');
    if (db !== '' && !/^\d{1,5}$/.test(db))
      fail(path, `${JSON.stringify(value)}: the path must be a database number`);
    return;
  }
  const m = /^(\[[^\]]+\]|[^:[\]]+):(\d{1,5})$/.exec(value);
  if (!m || Number(m[2]) > 65535 || Number(m[2]) === 0)
    fail(path, `${JSON.stringify(value)} must be "host:port" or a redis:// URL`);
}

function checkDuration(ms: number, path: string): void {
  if (!(ms > 0)) fail(path, 'must be greater than zero');
}

/** Startup checks of the section the running service uses (the reference's validate, plus ours). */
export function validateScheduler(config: ClusterConfig, queryOnly: boolean): void {
  const s = config.scheduler;
  if (!(LOG_LEVELS as readonly string[]).includes(config.logLevel.toLowerCase()))
    fail('log_level', `must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(config.logLevel)}`);
  if (!(LOG_FORMATS as readonly string[]).includes(config.logFormat.toLowerCase()))
    fail('log_format', `must be one of ${LOG_FORMATS.join(', ')}, got ${JSON.stringify(config.logFormat)}`);
  checkListen(s.grpcListenAddr, 'scheduler.grpc_listen_addr');
  checkListen(s.metricsListenAddr, 'scheduler.metrics_listen_addr');
  checkDuration(s.reportTtlMs, 'scheduler.report_ttl');
  checkDuration(s.bindingTtlMs, 'scheduler.binding_ttl');
  if (s.redisAddr.trim() !== '') checkRedisAddress(s.redisAddr.trim(), 'scheduler.redis_addr');
  if (queryOnly) {
    if (s.redisAddr.trim() === '') fail('scheduler.redis_addr', 'is required by --query-only');
    return;
  }
  const mode = s.discovery.mode.trim().toLowerCase() || 'static';
  if (mode === 'static') {
    if (s.nodes.length === 0) fail('scheduler.nodes', 'must not be empty with discovery mode static');
    const seen = new Set<string>();
    s.nodes.forEach((n, i) => {
      if (n.id === '' || n.endpoint === '') fail(`scheduler.nodes[${i}]`, 'requires id and endpoint');
      if (!isHttpUrl(n.endpoint))
        fail(
          `scheduler.nodes[${i}].endpoint`,
          `${JSON.stringify(n.endpoint)} must be an http:// or https:// URL`,
        );
      if (seen.has(n.id)) fail(`scheduler.nodes[${i}].id`, `${JSON.stringify(n.id)} is listed twice`);
      seen.add(n.id);
    });
  } else if (mode === 'kubernetes') {
    const k = s.discovery.kubernetes;
    const kp = 'scheduler.discovery.kubernetes';
    if (k.namespace.trim() === '') fail(`${kp}.namespace`, 'is required with discovery mode kubernetes');
    if (k.serviceName.trim() === '') fail(`${kp}.service_name`, 'is required with discovery mode kubernetes');
    if (k.port <= 0) fail(`${kp}.port`, 'must be greater than zero with discovery mode kubernetes');
    const scheme = k.scheme.trim() || 'http';
    if (scheme !== 'http' && scheme !== 'https')
      fail(`${kp}.scheme`, `must be http or https, got ${JSON.stringify(k.scheme)}`);
    for (const [key, selector] of [
      ['ignore_pod_selector', k.ignorePodSelector],
      ['no_schedule_pod_selector', k.noSchedulePodSelector],
    ] as const) {
      try {
        checkLabelSelector(selector);
      } catch (e) {
        fail(`${kp}.${key}`, `is invalid: ${(e as Error).message}`);
      }
    }
  } else {
    fail(
      'scheduler.discovery.mode',
      `must be one of static, kubernetes, got ${JSON.stringify(s.discovery.mode)}`,
    );
  }
}

/** The gateway section is parsed and checked with the scheduler's file so one file serves both processes. */
export function validateGatewaySection(config: ClusterConfig): void {
  const g = config.gateway;
  checkListen(g.httpListenAddr, 'gateway.http_listen_addr');
  checkListen(g.metricsListenAddr, 'gateway.metrics_listen_addr');
  if (g.schedulerAddr.trim() === '') fail('gateway.scheduler_addr', 'is required');
  checkDuration(g.requestTimeoutMs, 'gateway.request_timeout');
}

/** The strategy actually used: unknown or empty names fall back to round_robin, as in the reference. */
export function resolveStrategy(name: string): { strategy: StrategyName; fellBack: boolean } {
  const n = name.trim().toLowerCase();
  if ((STRATEGIES as readonly string[]).includes(n)) return { strategy: n as StrategyName, fellBack: false };
  return { strategy: 'round_robin', fellBack: n !== '' };
}
