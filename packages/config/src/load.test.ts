import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  assertSupportedVirtualizationMode,
  ConfigError,
  containerModeNotice,
  defaultConfigPath,
  loadConfig,
  NIL_UUID,
  redactConfig,
  type ConfigFlags,
  type LoadedConfig,
} from './index.js';
import { CONFIG_FIELDS } from './load.js';

const dir = mkdtempSync(join(tmpdir(), 'aenv-config-load-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

/** Writes `toml` to a fresh file (in `sub` of the temp dir) and loads it with only the given env. */
function load(toml: string, env: NodeJS.ProcessEnv = {}, flags: ConfigFlags = {}, sub = '.'): LoadedConfig {
  const d = join(dir, sub);
  mkdirSync(d, { recursive: true });
  const file = join(d, `c${n++}.toml`);
  writeFileSync(file, toml);
  return loadConfig({ configPath: file, env, flags });
}

function errorOf(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  throw new Error('expected a ConfigError');
}

describe('choosing the config file', () => {
  it('defaults to <repo>/config/default.toml', () => {
    const r = loadConfig({ env: {} });
    expect(r.configPath).toBe(defaultConfigPath());
    expect(r.configPath.endsWith('/config/default.toml')).toBe(true);
  });

  it('honours AENV_CONFIG_PATH (trimmed) and ignores it when blank', () => {
    const file = join(dir, 'via-env.toml');
    writeFileSync(file, 'api_addr = "127.0.0.1:1"\n');
    expect(loadConfig({ env: { AENV_CONFIG_PATH: `  ${file} ` } }).config.api_addr).toBe('127.0.0.1:1');
    expect(loadConfig({ env: { AENV_CONFIG_PATH: '   ' } }).configPath).toBe(defaultConfigPath());
  });

  it('--config wins over AENV_CONFIG_PATH', () => {
    const a = join(dir, 'flag.toml');
    const b = join(dir, 'env.toml');
    writeFileSync(a, 'api_addr = "127.0.0.1:2"\n');
    writeFileSync(b, 'api_addr = "127.0.0.1:3"\n');
    const r = loadConfig({ env: { AENV_CONFIG_PATH: b }, flags: { config: a } });
    expect(r.configPath).toBe(a);
    expect(r.config.api_addr).toBe('127.0.0.1:2');
  });

  it('fails clearly for a missing file and for invalid TOML', () => {
    const missing = join(dir, 'nope.toml');
    expect(errorOf(() => loadConfig({ env: { AENV_CONFIG_PATH: missing } })).message).toBe(
      `config file = ${JSON.stringify(missing)}: does not exist (chosen by env AENV_CONFIG_PATH)`,
    );
    expect(errorOf(() => load('[pool\nlow_watermark = 1')).message).toMatch(
      /is not valid TOML: .* at line 1, column/,
    );
  });
});

describe('precedence: flag > env > file > default', () => {
  const file =
    'api_addr = "127.0.0.1:8001"\nlog_format = "json"\nvirtualization_mode = "kvm"\n[node_identity]\nnode_id = "from-file"\n';

  it('uses the built-in default when nothing sets a key', () => {
    const r = load('');
    expect(r.config.api_addr).toBe('0.0.0.0:8000');
    expect(r.config.log_format).toBe('compact');
    expect(r.config.virtualization_mode).toBe('container');
    expect(r.config.node_identity.node_id).toBeUndefined();
    expect(r.sources.get('api_addr')).toEqual({ kind: 'default' });
  });

  it('the file overrides defaults', () => {
    const r = load(file);
    expect(r.config.api_addr).toBe('127.0.0.1:8001');
    expect(r.config.log_format).toBe('json');
    expect(r.config.virtualization_mode).toBe('kvm');
    expect(r.config.node_identity.node_id).toBe('from-file');
    expect(r.sources.get('api_addr')).toMatchObject({ kind: 'file' });
  });

  it('env overrides the file', () => {
    const env = {
      API_ADDR: '127.0.0.1:8002',
      AENV_LOG_FORMAT: 'pretty',
      AENV_VIRTUALIZATION_MODE: 'pvm',
      AENV_NODE_ID: 'from-env',
      AENV_OBSERVABILITY_SCHEDULER_REPORT_ENABLED: 'true',
      AENV_OBSERVABILITY_REPORT_INTERVAL_SECS: '7',
      AGENTENV_MEMORY_SNAPSHOT_TRACK_DIRTY_PAGES: 'false',
    };
    const r = load(file, env);
    expect(r.config.api_addr).toBe('127.0.0.1:8002');
    expect(r.config.log_format).toBe('pretty');
    expect(r.config.virtualization_mode).toBe('pvm');
    expect(r.config.node_identity.node_id).toBe('from-env');
    expect(r.config.observability.scheduler_report).toEqual({ enabled: true, interval_secs: 7 });
    expect(r.config.memory_snapshot.track_dirty_pages).toBe(false);
    expect(r.sources.get('api_addr')).toEqual({ kind: 'env', name: 'API_ADDR' });
  });

  it('flags override env', () => {
    const env = { API_ADDR: '127.0.0.1:8002', AENV_LOG_FORMAT: 'pretty', AENV_NODE_ID: 'from-env' };
    const flags: ConfigFlags = {
      apiAddr: '127.0.0.1:8003',
      logFormat: 'compact',
      nodeId: 'from-flag',
      set: [
        'observability.scheduler_report.interval_secs=9',
        'image.resolver.insecure_registries=["127.0.0.1:5000"]',
      ],
    };
    const r = load(file, { ...env, AENV_OBSERVABILITY_REPORT_INTERVAL_SECS: '7' }, flags);
    expect(r.config.api_addr).toBe('127.0.0.1:8003');
    expect(r.config.log_format).toBe('compact');
    expect(r.config.node_identity.node_id).toBe('from-flag');
    expect(r.config.observability.scheduler_report.interval_secs).toBe(9);
    expect(r.config.image.resolver.insecure_registries).toEqual(['127.0.0.1:5000']);
    expect(r.sources.get('api_addr')).toEqual({ kind: 'flag', name: '--api-addr' });
  });

  it('blank env vars count as unset; an empty list keeps the file value', () => {
    const r = load('api_addr = "127.0.0.1:8001"\n[sandbox_proxy]\ndomains = ["a.test"]\n', {
      API_ADDR: '  ',
      AENV_SANDBOX_PROXY_DOMAINS: ' , ',
    });
    expect(r.config.api_addr).toBe('127.0.0.1:8001');
    expect(r.config.sandbox_proxy.domains).toEqual(['a.test']);
  });

  it('a blank seed in the environment is an error, not "unset"', () => {
    expect(errorOf(() => load('', { AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: '  ' })).message).toBe(
      'sandbox.access_token_hash_seed = "": must not be empty when set (unset it to use the managed seed) (from env AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED)',
    );
    expect(
      load('', { AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: ' s3cret ' }).config.sandbox.access_token_hash_seed,
    ).toBe('s3cret');
  });

  it('an unknown --set key or a malformed --set is an error', () => {
    expect(errorOf(() => load('', {}, { set: ['image.cache.gc.enabeld=false'] })).message).toBe(
      'image.cache.gc.enabeld = "false": unknown configuration key (from flag --set image.cache.gc.enabeld)',
    );
    expect(errorOf(() => load('', {}, { set: ['log_level'] })).message).toContain(
      'expected --set <key>=<value>',
    );
  });

  it("honours every node-server variable of docs/configuration.md (and aenv's log variables)", () => {
    const bound = new Set(CONFIG_FIELDS.map((f) => f.field.env).filter(Boolean));
    const reference = [
      'API_ADDR',
      'AENV_LOG_FORMAT',
      'AENV_LOG_LEVEL',
      'AENV_NODE_ID',
      'AENV_CLUSTER_ID',
      'AENV_SERVICE_INSTANCE_ID',
      'AENV_OBSERVABILITY_SCHEDULER_REPORT_ENABLED',
      'AENV_OBSERVABILITY_SCHEDULER_ENDPOINT',
      'AENV_OBSERVABILITY_REPORT_INTERVAL_SECS',
      'AENV_CUSTOM_EXTENSION_URL',
      'AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED',
      'AENV_SANDBOX_PROXY_DOMAINS',
      'AENV_HOME_PATH',
      'AENV_RUNTIME_PATH',
      'AENV_DEPS_PATH',
      'AENV_VIRTUALIZATION_MODE',
      'AENV_SNAPSHOT_LOCAL_CACHE_PATH',
      'AENV_SNAPSHOT_STORE',
      'AENV_UBLK_DAEMON_BINARY_PATH',
      'AENV_UBLK_DAEMON_METRICS_LISTEN_ADDR',
      'AENV_FIRECRACKER_WORK_DIR',
      'AENV_FIRECRACKER_SERIAL_DIR',
      'AENV_PERSISTED_SANDBOX_STORE_PATH',
      'AGENTENV_MEMORY_SNAPSHOT_TRACK_DIRTY_PAGES',
    ];
    expect(reference.filter((v) => !bound.has(v))).toEqual([]);
  });

  it('a blank AENV_UBLK_DAEMON_METRICS_LISTEN_ADDR disables the endpoint, as in the reference', () => {
    expect(
      load('', { AENV_UBLK_DAEMON_METRICS_LISTEN_ADDR: ' ' }).config.ublk.daemon_metrics_listen_addr,
    ).toBe('');
  });

  it('every env var of the schema reaches its key', () => {
    const env: NodeJS.ProcessEnv = {
      AENV_HOME_PATH: '/h',
      AENV_RUNTIME_PATH: '/r',
      AENV_DEPS_PATH: '/d',
      AENV_FIRECRACKER_WORK_DIR: '/fw',
      AENV_FIRECRACKER_SERIAL_DIR: '/fs',
      AENV_CUSTOM_EXTENSION_URL: 'http://127.0.0.1:9999',
      AENV_OBSERVABILITY_SCHEDULER_ENDPOINT: ' http://127.0.0.1:9090 ',
      AENV_SANDBOX_PROXY_DOMAINS: 'A.test., b.test',
      AENV_PERSISTED_SANDBOX_STORE_PATH: '/p',
      AENV_SNAPSHOT_LOCAL_CACHE_PATH: '/slc',
      AENV_SNAPSHOT_STORE: '/ss',
      AENV_UBLK_DAEMON_BINARY_PATH: '/ub',
      AENV_UBLK_DAEMON_METRICS_LISTEN_ADDR: '127.0.0.1:9103',
      AENV_CLUSTER_ID: '0193A1B2-0000-7000-8000-000000000001',
      AENV_SERVICE_INSTANCE_ID: 'svc-1',
      AENV_LOG_LEVEL: 'debug',
    };
    const c = load('', env).config;
    expect([c.home_path, c.runtime_path, c.deps_path]).toEqual(['/h', '/r', '/d']);
    expect([c.firecracker.work_dir, c.firecracker.serial_dir]).toEqual(['/fw', '/fs']);
    expect(c.custom_extension.url).toBe('http://127.0.0.1:9999');
    expect(c.cluster.scheduler_endpoint).toBe('http://127.0.0.1:9090');
    expect(c.sandbox_proxy.domains).toEqual(['a.test', 'b.test']);
    expect(c.orchestrator.persisted_sandbox_store_path).toBe('/p');
    expect([c.snapshot.local_cache_path, c.backend.posix_fs.snapshot_store]).toEqual(['/slc', '/ss']);
    expect([c.ublk.daemon_binary_path, c.ublk.daemon_metrics_listen_addr]).toEqual(['/ub', '127.0.0.1:9103']);
    expect(c.node_identity.cluster_id).toBe('0193a1b2-0000-7000-8000-000000000001');
    expect(c.node_identity.service_instance_id).toBe('svc-1');
    expect(c.log_level).toBe('debug');
  });
});

describe('paths', () => {
  it('replaces $AENV_HOME and $AENV_RUNTIME and resolves relative paths against the config dir', () => {
    const r = load(
      [
        'home_path = "state"',
        'runtime_path = "$AENV_HOME/run"',
        '[firecracker]',
        'work_dir = "fc-work"',
        '[ublk]',
        'daemon_socket_path = "$AENV_RUNTIME/ublk.sock"',
        '[orchestrator]',
        'persisted_sandbox_store_path = "$AENV_RUNTIME/../persisted"',
        '[image.cache]',
        'root_dir = "/abs//cache/"',
      ].join('\n'),
      {},
      {},
      'cfgdir',
    );
    const base = join(dir, 'cfgdir');
    const c = r.config;
    expect(c.home_path).toBe(join(base, 'state'));
    expect(c.runtime_path).toBe(join(base, 'state/run'));
    expect(c.deps_path).toBe(join(base, 'state/deps'));
    expect(c.firecracker.work_dir).toBe(join(base, 'fc-work'));
    expect(c.ublk.daemon_socket_path).toBe(join(base, 'state/run/ublk.sock'));
    expect(c.orchestrator.persisted_sandbox_store_path).toBe(join(base, 'state/persisted'));
    expect(c.image.cache.root_dir).toBe('/abs/cache');
    expect(c.snapshot.local_cache_path).toBe(join(base, 'state/snapshot-local-cache'));
    expect(c.runtime.criu_path).toBe(join(base, 'state/deps/criu/current/bin/criu'));
    expect(c.runtime.tools_dir).toBe(join(base, 'state/deps/tools'));
  });

  it('keeps a bare runc name for PATH lookup and resolves one with a slash', () => {
    expect(load('').config.runtime.runc_path).toBe('runc');
    expect(load('[runtime]\nrunc_path = "bin/runc"', {}, {}, 'r').config.runtime.runc_path).toBe(
      join(dir, 'r/bin/runc'),
    );
  });

  it('rejects placeholders that cannot apply and warns about unknown ones', () => {
    expect(errorOf(() => load('home_path = "$AENV_HOME/x"')).message).toBe(
      'home_path = "$AENV_HOME/x": home_path cannot use placeholders (it defines $AENV_HOME)',
    );
    expect(errorOf(() => load('runtime_path = "$AENV_RUNTIME/x"')).message).toContain(
      'runtime_path = "$AENV_RUNTIME/x": $AENV_RUNTIME is not available here',
    );
    expect(errorOf(() => load('[firecracker]\nwork_dir = ""')).message).toBe(
      'firecracker.work_dir = "": must not be empty',
    );
    const r = load('[snapshot]\nlocal_cache_path = "/x/$HOME/y"');
    expect(r.warnings).toEqual([
      'snapshot.local_cache_path = "/x/$HOME/y": "$HOME" is not a placeholder (only $AENV_HOME and $AENV_RUNTIME are) and is used literally',
    ]);
    expect(r.config.snapshot.local_cache_path).toBe('/x/$HOME/y');
  });
});

describe('unknown keys and types', () => {
  it('warns about unknown keys with their full path and a suggestion, and ignores them', () => {
    const r = load(
      '[image.cache.gc]\nenabeld = false\n[drives]\nmax_size_mb = 1\n[pool.network]\nsurprise = 1\n',
    );
    expect(r.warnings).toEqual([
      `unknown config key "image.cache.gc.enabeld" in ${r.configPath} (ignored); did you mean "enabled"?`,
      `unknown config key "drives" in ${r.configPath} (ignored)`,
      `unknown config key "pool.network.surprise" in ${r.configPath} (ignored)`,
    ]);
    expect(r.config.image.cache.gc.enabled).toBe(true);
  });

  it('names key, value and expected type for wrong types', () => {
    expect(errorOf(() => load('[machine]\nvcpu_count = "two"')).message).toBe(
      'machine.vcpu_count = "two": expected an integer',
    );
    expect(errorOf(() => load('[machine]\nvcpu_count = 1.5')).message).toBe(
      'machine.vcpu_count = 1.5: expected an integer',
    );
    expect(errorOf(() => load('[observability]\nenabled = "yes"')).message).toBe(
      'observability.enabled = "yes": expected a boolean (true or false)',
    );
    expect(errorOf(() => load('[sandbox_proxy]\ndomains = "a.test"')).message).toBe(
      'sandbox_proxy.domains = "a.test": expected an array of strings',
    );
    expect(errorOf(() => load('[image.resolver]\nsearch_registries = ["a", 1]')).message).toBe(
      'image.resolver.search_registries[1] = 1: expected a string',
    );
    expect(errorOf(() => load('virtualization_mode = "firecracker"')).message).toBe(
      'virtualization_mode = "firecracker": must be one of "container", "kvm", "pvm"',
    );
    expect(errorOf(() => load('pool = 3')).message).toBe('pool = 3: expected a table (a [section])');
    expect(errorOf(() => load('[machine.vcpu_count]\nx = 1')).message).toBe(
      'machine.vcpu_count = table {"x":1}: expected an integer',
    );
    expect(errorOf(() => load('[node_identity]\nnode_id = 2024-01-01')).message).toBe(
      'node_identity.node_id = 2024-01-01: expected a string',
    );
    expect(errorOf(() => load('', { AENV_OBSERVABILITY_REPORT_INTERVAL_SECS: 'soon' })).message).toBe(
      'observability.scheduler_report.interval_secs = "soon": expected an integer (from env AENV_OBSERVABILITY_REPORT_INTERVAL_SECS)',
    );
    expect(errorOf(() => load('api_addr = "localhost"')).message).toBe(
      'api_addr = "localhost": must be "host:port" (IPv4, [IPv6] or DNS name; port 0-65535)',
    );
  });

  it('never echoes secret values', () => {
    const e = errorOf(() => load('[sandbox]\naccess_token_hash_seed = 12345'));
    expect(e.message).toBe('sandbox.access_token_hash_seed = "<redacted>": expected a string');
  });

  it('accepts the reference aliases of backend.oss keys, but not both spellings', () => {
    const r = load('[backend.oss]\naddressingStyle = "path"\ncredential-process = "/bin/creds"\n');
    expect(r.config.backend.oss.addressing_style).toBe('path');
    expect(r.config.backend.oss.credential_process).toBe('/bin/creds');
    expect(r.warnings).toEqual([]);
    expect(
      errorOf(() => load('[backend.oss]\naddressingStyle = "path"\naddressing_style = "virtual"')).message,
    ).toContain('backend.oss.addressing_style = "virtual": given more than once');
  });
});

describe('normalisation', () => {
  it('normalises sandbox_proxy.domains', () => {
    const r = load(
      '[sandbox_proxy]\ndomains = [" Sandbox.Example.COM. ", "", "a.test", "sandbox.example.com"]',
    );
    expect(r.config.sandbox_proxy.domains).toEqual(['sandbox.example.com', 'a.test']);
  });

  it('rejects invalid proxy domains naming the entry', () => {
    for (const bad of ['-a.test', 'a_b.test', 'a..test', `${'a'.repeat(64)}.test`]) {
      expect(errorOf(() => load(`[sandbox_proxy]\ndomains = [${JSON.stringify(bad)}]`)).message).toContain(
        `contains invalid domain ${JSON.stringify(bad)}`,
      );
    }
  });

  it('trims image.resolver values', () => {
    const r = load(
      '[image.resolver]\ndefault_image = "  "\nsearch_registries = [" registry.test/ ", "b.test//"]\nallowed_registries = []\n',
    );
    expect(r.config.image.resolver.default_image).toBe('ubuntu:24.04');
    expect(r.config.image.resolver.search_registries).toEqual(['registry.test', 'b.test']);
    expect(r.config.image.resolver.allowed_registries).toEqual([]);
    expect(load('').config.image.resolver.allowed_registries).toBeUndefined();
    expect(errorOf(() => load('[image.resolver]\ninsecure_registries = [" "]')).message).toBe(
      'image.resolver.insecure_registries = [" "]: entries must not be empty',
    );
  });

  it('turns gc interval 0 into 1800 and clamps the peer refresh interval', () => {
    expect(load('[image.cache.gc]\ninterval_secs = 0').config.image.cache.gc.interval_secs).toBe(1800);
    const r = load('[p2p]\npeer_discovery_refresh_interval_secs = 0');
    expect(r.config.p2p.peer_discovery_refresh_interval_secs).toBe(1);
    expect(r.warnings).toEqual(['p2p.peer_discovery_refresh_interval_secs = 0 is below 1; using 1']);
  });

  it('an invalid cluster_id becomes the nil UUID with a warning (file and env)', () => {
    const r = load('[node_identity]\ncluster_id = "not-a-uuid"');
    expect(r.config.node_identity.cluster_id).toBe(NIL_UUID);
    expect(r.warnings).toEqual([
      `node_identity.cluster_id = "not-a-uuid" is not a UUID; using the nil UUID ${NIL_UUID}`,
    ]);
    const e = load('', { AENV_CLUSTER_ID: 'cluster-7' });
    expect(e.config.node_identity.cluster_id).toBe(NIL_UUID);
    expect(e.warnings[0]).toContain('(from env AENV_CLUSTER_ID) is not a UUID');
  });

  it('trims the scheduler endpoint; blank = unset', () => {
    expect(load('[cluster]\nscheduler_endpoint = "   "').config.cluster.scheduler_endpoint).toBeUndefined();
    expect(errorOf(() => load('[cluster]\nscheduler_endpoint = "127.0.0.1:9090"')).message).toBe(
      'cluster.scheduler_endpoint = "127.0.0.1:9090": must be an http:// or https:// URL',
    );
  });
});

describe('the loaded object', () => {
  it('is deeply frozen', () => {
    const c = loadConfig({ env: {} }).config;
    expect(Object.isFrozen(c)).toBe(true);
    expect(Object.isFrozen(c.image.cache.gc)).toBe(true);
    expect(Object.isFrozen(c.network.egress.always_denied_cidrs)).toBe(true);
    expect(() => {
      (c.machine as { vcpu_count: number }).vcpu_count = 3;
    }).toThrow(TypeError);
  });

  it('does not share state between loads', () => {
    const a = load('[firecracker]\nallowed_extra_boot_args_prefixes = []').config;
    const b = load('').config;
    expect(a.firecracker.allowed_extra_boot_args_prefixes).not.toBe(
      b.firecracker.allowed_extra_boot_args_prefixes,
    );
  });

  it('redacts secrets for logging', () => {
    const c = load('[sandbox]\naccess_token_hash_seed = "hunter2-hunter2"').config;
    const red = redactConfig(c) as { sandbox: { access_token_hash_seed: string }; home_path: string };
    expect(red.sandbox.access_token_hash_seed).toBe('<redacted>');
    expect(JSON.stringify(red)).not.toContain('hunter2');
    expect(red.home_path).toBe(c.home_path);
  });
});

describe('virtualization modes', () => {
  it('loads kvm and pvm, but the server-start check refuses them naming the key', () => {
    const kvm = load('virtualization_mode = "kvm"').config;
    expect(errorOf(() => assertSupportedVirtualizationMode(kvm)).message).toContain(
      'virtualization_mode = "kvm": this build has no microVM driver yet',
    );
    const pvm = load('', { AENV_VIRTUALIZATION_MODE: 'pvm' }).config;
    expect(() => assertSupportedVirtualizationMode(pvm)).toThrow(/virtualization_mode = "pvm"/);
    expect(() => assertSupportedVirtualizationMode(load('').config)).not.toThrow();
  });

  it('lists configured microVM-only settings once for container mode', () => {
    const shipped = loadConfig({ env: {} });
    expect(shipped.keysWithoutEffectInContainerMode).toEqual([]);
    expect(containerModeNotice(shipped.config, shipped.keysWithoutEffectInContainerMode)).toBeUndefined();
    const r = load(
      '[firecracker]\nsocket_poll_ms = 5\n[pool.block]\nenabled = true\n[image.resolver]\nconvert_standard_oci = false',
    );
    expect(r.keysWithoutEffectInContainerMode).toEqual([
      'firecracker.socket_poll_ms',
      'image.resolver.convert_standard_oci',
    ]);
    expect(containerModeNotice(r.config, r.keysWithoutEffectInContainerMode)).toBe(
      'virtualization_mode = "container": these settings only apply to the microVM drivers and are ignored: firecracker.socket_poll_ms, image.resolver.convert_standard_oci',
    );
  });
});
