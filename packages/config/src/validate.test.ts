import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, type LoadedConfig } from './index.js';
import { CONFIG_FIELDS } from './load.js';
import type { MutableConfig } from './types.js';
import { validateConfig } from './validate.js';

const dir = mkdtempSync(join(tmpdir(), 'aenv-config-validate-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

function load(toml: string, env: NodeJS.ProcessEnv = {}): LoadedConfig {
  const file = join(dir, `c${n++}.toml`);
  writeFileSync(file, `home_path = ${JSON.stringify(join(dir, 'home'))}\n${toml}`);
  return loadConfig({ configPath: file, env });
}

function errorOf(toml: string, env: NodeJS.ProcessEnv = {}): ConfigError {
  try {
    load(toml, env);
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  throw new Error('expected a ConfigError');
}

/** Each case: a failing TOML snippet, the message it must produce, and a passing neighbour. */
const rules: { name: string; bad: string; message: string; good: string }[] = [
  {
    name: 'pool low <= high',
    bad: '[pool]\nlow_watermark = 10\nhigh_watermark = 5',
    message:
      'pool.low_watermark = 10: must be <= pool.high_watermark (5) while pool.network, pool.block, pool.firecracker are enabled',
    good: '[pool]\nlow_watermark = 5\nhigh_watermark = 5',
  },
  {
    name: 'pool low > high allowed when no pool is in use',
    bad: '[pool]\nlow_watermark = 10\nhigh_watermark = 5\n[pool.block]\nenabled = false\n[pool.firecracker]\nenabled = false',
    message: 'pool.low_watermark = 10: must be <= pool.high_watermark (5) while pool.network is enabled',
    good:
      '[pool]\nlow_watermark = 10\nhigh_watermark = 5\n[pool.network]\nmaintenance_enabled = false\n' +
      '[pool.block]\nenabled = false\n[pool.firecracker]\nenabled = false',
  },
  {
    name: 'warm sandbox pool: warm_sandboxes (its low watermark) <= high_watermark',
    bad: '[pool]\nwarm_sandboxes = 8\nhigh_watermark = 4',
    message:
      "pool.warm_sandboxes = 8: must be <= pool.high_watermark (4): it is the warm sandbox pool's low watermark (0 disables the pool)",
    good: '[pool]\nwarm_sandboxes = 4\nhigh_watermark = 4',
  },
  {
    name: 'warm sandbox pool off: any high_watermark',
    bad: '[pool]\nwarm_sandboxes = 1\nlow_watermark = 0\nhigh_watermark = 0',
    message:
      "pool.warm_sandboxes = 1: must be <= pool.high_watermark (0): it is the warm sandbox pool's low watermark (0 disables the pool)",
    good: '[pool]\nwarm_sandboxes = 0\nlow_watermark = 0\nhigh_watermark = 0',
  },
  {
    name: 'warm_sandboxes is not negative',
    bad: '[pool]\nwarm_sandboxes = -1',
    message: 'pool.warm_sandboxes = -1: must be >= 0',
    good: '[pool]\nwarm_sandboxes = 0',
  },
  {
    name: 'high_watermark is not negative',
    bad: '[pool]\nhigh_watermark = -2',
    message: 'pool.high_watermark = -2: must be >= 0',
    good: '[pool]\nhigh_watermark = 2',
  },
  {
    name: 'sandbox_fill_concurrency >= 1',
    bad: '[pool]\nsandbox_fill_concurrency = 0',
    message: 'pool.sandbox_fill_concurrency = 0: must be >= 1',
    good: '[pool]\nsandbox_fill_concurrency = 1',
  },
  {
    name: 'sandbox_idle_secs >= 1',
    bad: '[pool]\nsandbox_idle_secs = 0',
    message: 'pool.sandbox_idle_secs = 0: must be >= 1',
    good: '[pool]\nsandbox_idle_secs = 1',
  },
  {
    name: 'sandbox_min_available_memory_ratio < 1',
    bad: '[pool]\nsandbox_min_available_memory_ratio = 1',
    message: 'pool.sandbox_min_available_memory_ratio = 1: must be a finite number with 0 <= ratio < 1',
    good: '[pool]\nsandbox_min_available_memory_ratio = 0',
  },
  {
    name: 'sandbox_min_available_memory_ratio >= 0',
    bad: '[pool]\nsandbox_min_available_memory_ratio = -0.1',
    message: 'pool.sandbox_min_available_memory_ratio = -0.1: must be a finite number with 0 <= ratio < 1',
    good: '[pool]\nsandbox_min_available_memory_ratio = 0.5',
  },
  {
    name: 'fill_concurrency > 0',
    bad: '[pool.firecracker]\nfill_concurrency = 0',
    message: 'pool.firecracker.fill_concurrency = 0: must be > 0',
    good: '[pool.firecracker]\nfill_concurrency = 1',
  },
  {
    name: 'gc ratio > 0',
    bad: '[image.cache.gc]\nlow_watermark_ratio = 0',
    message: 'image.cache.gc.low_watermark_ratio = 0: must be a finite number with 0 < ratio <= 1',
    good: '[image.cache.gc]\nlow_watermark_ratio = 0.01',
  },
  {
    name: 'gc ratio <= 1',
    bad: '[image.cache.gc]\nhigh_watermark_ratio = 1.5',
    message: 'image.cache.gc.high_watermark_ratio = 1.5: must be a finite number with 0 < ratio <= 1',
    good: '[image.cache.gc]\nhigh_watermark_ratio = 1',
  },
  {
    name: 'gc ratio finite',
    bad: '[image.cache.gc]\nhigh_watermark_ratio = inf',
    message: 'image.cache.gc.high_watermark_ratio = Infinity: expected a finite number',
    good: '[image.cache.gc]\nhigh_watermark_ratio = 0.9',
  },
  {
    name: 'gc low <= high',
    bad: '[image.cache.gc]\nlow_watermark_ratio = 0.99',
    message: 'image.cache.gc.low_watermark_ratio = 0.99: must be <= high_watermark_ratio (0.95)',
    good: '[image.cache.gc]\nlow_watermark_ratio = 0.95',
  },
  {
    name: 'registry_endpoints are registry=URL pairs',
    bad: '[image.resolver]\nregistry_endpoints = ["127.0.0.1:5000=http://127.0.0.1:5000", "mirror.test"]',
    message: 'image.resolver.registry_endpoints[1] = "mirror.test": must be "<registry>=<http(s) URL>"',
    good: '[image.resolver]\nregistry_endpoints = ["127.0.0.1:5000=http://127.0.0.1:5000"]',
  },
  {
    name: 'always_denied_cidrs are IPv4 CIDRs',
    bad: '[network.egress]\nalways_denied_cidrs = ["10.0.0.0/8", "fd00::/8"]',
    message: 'network.egress.always_denied_cidrs[1] = "fd00::/8": is not an IPv4 CIDR (a.b.c.d/n)',
    good: '[network.egress]\nalways_denied_cidrs = ["10.0.0.0/8", "192.0.2.0/24"]',
  },
  {
    name: 'dns.nameserver is an IPv4 address',
    bad: '[network.dns]\nnameserver = "10.0.0.256"',
    message: 'network.dns.nameserver = "10.0.0.256": an IPv4 address, or empty',
    good: '[network.dns]\nnameserver = "10.0.0.2"',
  },
  {
    name: 'host_interaction_cidr is a CIDR',
    bad: '[network.internal]\nhost_interaction_cidr = "10.11.0.0"',
    message: 'network.internal.host_interaction_cidr = "10.11.0.0": is not an IPv4 CIDR (a.b.c.d/n)',
    good: '[network.internal]\nhost_interaction_cidr = "10.20.0.0/17"',
  },
  {
    name: 'host_interaction_cidr has >= 32768 addresses',
    bad: '[network.internal]\nhost_interaction_cidr = "10.20.0.0/18"',
    message:
      'network.internal.host_interaction_cidr = "10.20.0.0/18": must hold at least 32768 addresses (prefix /17 or shorter)',
    good: '[network.internal]\nhost_interaction_cidr = "10.20.0.0/16"',
  },
  {
    name: 'veth_cidr has >= 65536 addresses',
    bad: '[network.internal]\nveth_cidr = "10.20.0.0/17"',
    message:
      'network.internal.veth_cidr = "10.20.0.0/17": must hold at least 65536 addresses (prefix /16 or shorter)',
    good: '[network.internal]\nveth_cidr = "10.20.0.0/16"',
  },
  {
    name: 'veth_cidr host bits',
    bad: '[network.internal]\nveth_cidr = "10.20.1.0/16"',
    message: 'network.internal.veth_cidr = "10.20.1.0/16": has host bits set (the network is 10.20.0.0/16)',
    good: '[network.internal]\nveth_cidr = "10.20.0.0/16"',
  },
  {
    name: 'internal pools do not overlap each other',
    bad: '[network.internal]\nhost_interaction_cidr = "10.0.0.0/15"\nveth_cidr = "10.1.0.0/16"',
    message:
      'network.internal.host_interaction_cidr = "10.0.0.0/15": must not overlap network.internal.veth_cidr (10.1.0.0/16)',
    good: '[network.internal]\nhost_interaction_cidr = "10.0.0.0/16"\nveth_cidr = "10.1.0.0/16"',
  },
  {
    name: 'internal pools do not overlap the VM link',
    bad: '[network.internal]\nveth_cidr = "169.254.0.0/16"',
    message:
      'network.internal.veth_cidr = "169.254.0.0/16": must not overlap the fixed VM link (169.254.0.20/30)',
    good: '[network.internal]\nveth_cidr = "169.253.0.0/16"',
  },
  {
    name: 'resize_timeout_secs > 0',
    bad: '[ublk.overlaybd]\nresize_timeout_secs = 0',
    message: 'ublk.overlaybd.resize_timeout_secs = 0: must be > 0',
    good: '[ublk.overlaybd]\nresize_timeout_secs = 1',
  },
  {
    name: 'background download concurrency 1..16',
    bad: '[memory_snapshot.background_download]\nconcurrency = 17\nblock_size = 1048576',
    message: 'memory_snapshot.background_download.concurrency = 17: must be between 1 and 16',
    good: '[memory_snapshot.background_download]\nconcurrency = 16\nblock_size = 1048576',
  },
  {
    name: 'background download concurrency >= 1',
    bad: '[memory_snapshot.background_download]\nconcurrency = 0',
    message: 'memory_snapshot.background_download.concurrency = 0: must be between 1 and 16',
    good: '[memory_snapshot.background_download]\nconcurrency = 1',
  },
  {
    name: 'background download block_size <= 64 MiB',
    bad: '[memory_snapshot.background_download]\nblock_size = 67108865\nconcurrency = 1',
    message:
      'memory_snapshot.background_download.block_size = 67108865: must be between 1 and 67108864 (64 MiB)',
    good: '[memory_snapshot.background_download]\nblock_size = 67108864\nconcurrency = 1',
  },
  {
    name: 'block_size × concurrency <= 256 MiB',
    bad: '[memory_snapshot.background_download]\nblock_size = 33554432\nconcurrency = 9',
    message:
      'memory_snapshot.background_download.block_size = 33554432: times concurrency (9) must be <= 268435456 (256 MiB)',
    good: '[memory_snapshot.background_download]\nblock_size = 33554432\nconcurrency = 8',
  },
  {
    name: 'max_inflight_blocks 1..128',
    bad: '[memory_snapshot.background_download]\nmax_inflight_blocks = 129\nblock_size = 1048576',
    message: 'memory_snapshot.background_download.max_inflight_blocks = 129: must be between 1 and 128',
    good: '[memory_snapshot.background_download]\nmax_inflight_blocks = 128\nblock_size = 1048576',
  },
  {
    name: 'block_size × max_inflight_blocks <= 2 GiB',
    bad: '[memory_snapshot.background_download]\nblock_size = 33554432\nconcurrency = 1\nmax_inflight_blocks = 65',
    message:
      'memory_snapshot.background_download.block_size = 33554432: times max_inflight_blocks (65) must be <= 2147483648 (2 GiB)',
    good: '[memory_snapshot.background_download]\nblock_size = 33554432\nconcurrency = 1\nmax_inflight_blocks = 64',
  },
  {
    name: 'background download delay >= 0',
    bad: '[memory_snapshot.background_download]\ndelay = -1',
    message: 'memory_snapshot.background_download.delay = -1: must be >= 0',
    good: '[memory_snapshot.background_download]\ndelay = 0',
  },
  {
    name: 'background download try_cnt >= 1',
    bad: '[memory_snapshot.background_download]\ntry_cnt = 0',
    message: 'memory_snapshot.background_download.try_cnt = 0: must be >= 1',
    good: '[memory_snapshot.background_download]\ntry_cnt = 1',
  },
  {
    name: 'memory overlaybd config differs from the runtime one',
    bad: '[ublk.overlaybd]\nglobal_config_path = "/x/a.json"\n[memory_snapshot]\noverlaybd_global_config_path = "/x/a.json"',
    message:
      'memory_snapshot.overlaybd_global_config_path = "/x/a.json": must differ from ublk.overlaybd.global_config_path (/x/a.json)',
    good: '[ublk.overlaybd]\nglobal_config_path = "/x/a.json"\n[memory_snapshot]\noverlaybd_global_config_path = "/x/b.json"',
  },
  {
    name: 'memory overlaybd config differs from the derived convert config',
    bad: '[ublk.overlaybd]\nglobal_config_path = "/x/a.json"\n[memory_snapshot]\noverlaybd_global_config_path = "/x/convert-a.json"',
    message:
      'memory_snapshot.overlaybd_global_config_path = "/x/convert-a.json": must differ from the derived convert config (/x/convert-a.json)',
    good: '[ublk.overlaybd]\nglobal_config_path = "/x/a.json"\n[memory_snapshot]\noverlaybd_global_config_path = "/x/mem-a.json"',
  },
  {
    name: 'memory overlaybd config differs from the derived resize config',
    bad: '[ublk.overlaybd]\nglobal_config_path = "/x/a.json"\n[memory_snapshot]\noverlaybd_global_config_path = "/x/resize-a.json"',
    message:
      'memory_snapshot.overlaybd_global_config_path = "/x/resize-a.json": must differ from the derived resize config (/x/resize-a.json)',
    good: '[ublk.overlaybd]\nglobal_config_path = "/x/a.json"\n[memory_snapshot]\noverlaybd_global_config_path = "/y/resize-a.json"',
  },
  {
    name: 'disk rate limit: bandwidth burst needs a sustained rate',
    bad: '[machine.disk_rate_limit]\nenabled = true\nbandwidth_burst_bytes = 10',
    message: 'machine.disk_rate_limit.bandwidth_burst_bytes = 10: requires a nonzero bandwidth_bytes_per_sec',
    good: '[machine.disk_rate_limit]\nenabled = true\nbandwidth_burst_bytes = 10\nbandwidth_bytes_per_sec = 100',
  },
  {
    name: 'disk rate limit: iops burst needs sustained iops',
    bad: '[machine.disk_rate_limit]\nenabled = true\niops_burst = 10',
    message: 'machine.disk_rate_limit.iops_burst = 10: requires a nonzero iops',
    good: '[machine.disk_rate_limit]\nenabled = false\niops_burst = 10',
  },
  {
    name: 'disk rate limit values fit i64 (and JS safe integers)',
    bad: '[machine.disk_rate_limit]\nenabled = true\niops = 9223372036854775807',
    message: 'is not valid TOML: integer value cannot be represented losslessly at line 4, column 8',
    good: '[machine.disk_rate_limit]\nenabled = true\niops = 9007199254740991',
  },
  {
    name: 'explicit seed is non-empty after trim',
    bad: '[sandbox]\naccess_token_hash_seed = "   "',
    message:
      'sandbox.access_token_hash_seed = "": must not be empty when set (unset it to use the managed seed)',
    good: '[sandbox]\naccess_token_hash_seed = " s "',
  },
  {
    name: 'explicit record signing secret is non-empty after trim',
    bad: '[snapshot]\nrecord_signing_secret = "  "',
    message:
      'snapshot.record_signing_secret = "": must not be empty when set (unset it to use the managed key)',
    good: '[snapshot]\nrecord_signing_secret = " k "',
  },
  {
    name: 'local image dirs are absolute and not the root',
    bad: '[image.resolver]\nlocal_image_dirs = ["/srv/images", "images"]',
    message: 'image.resolver.local_image_dirs[1] = "images": must be an absolute path without ".."',
    good: '[image.resolver]\nlocal_image_dirs = ["/srv/images/"]',
  },
  {
    name: 'local image dirs never include /',
    bad: '[image.resolver]\nlocal_image_dirs = ["/"]',
    message:
      'image.resolver.local_image_dirs[0] = "/": must not be "/" (name the directories that hold image layouts)',
    good: '[image.resolver]\nlocal_image_dirs = []',
  },
  {
    name: 'tools.drive_path needs tools.version',
    bad: '[tools]\ndrive_path = "/t.ext4"',
    message: 'tools.version is not set: required when tools.drive_path is set',
    good: '[tools]\ndrive_path = "/t.ext4"\nversion = "0.1.0-custom.1"',
  },
  {
    name: 'tools.version is SemVer without build metadata',
    bad: '[tools]\nversion = "0.1.0+build.5"',
    message: 'tools.version = "0.1.0+build.5": must be a SemVer version without build metadata',
    good: '[tools]\nversion = "0.1.0"',
  },
  {
    name: 'oss backend needs endpoint, bucket and region',
    bad: '[snapshot]\nrepository_backend = "oss"\n[backend.oss]\nendpoint = "http://127.0.0.1:9000"\nbucket = "b"',
    message: 'backend.oss.region is not set: required when snapshot.repository_backend = "oss"',
    good: '[snapshot]\nrepository_backend = "oss"\n[backend.oss]\nendpoint = "http://127.0.0.1:9000"\nbucket = "b"\nregion = "r"',
  },
  {
    name: 'uid span fits in 32 bits',
    bad: '[runtime]\nuid_map_host_start = 4227858432\nuid_map_size = 65536\nuid_ranges = 1024',
    message:
      'runtime.uid_ranges = 1024: with uid_map_host_start (4227858432) and uid_map_size (65536) the uid span must stay below 4294967295',
    good: '[runtime]\nuid_map_host_start = 4227858432\nuid_map_size = 65536\nuid_ranges = 1022',
  },
  {
    name: 'default_disk_size_mb is a multiple of 1024',
    bad: '[runtime]\ndefault_disk_size_mb = 2000',
    message: 'runtime.default_disk_size_mb = 2000: must be a multiple of 1024',
    good: '[runtime]\ndefault_disk_size_mb = 2048',
  },
  {
    name: 'machine.vcpu_count within limits.max_cpu_count',
    bad: '[limits]\nmax_cpu_count = 1\n[machine]\nvcpu_count = 2',
    message: 'machine.vcpu_count = 2: must be <= limits.max_cpu_count (1)',
    good: '[limits]\nmax_cpu_count = 0\n[machine]\nvcpu_count = 64',
  },
  {
    name: 'machine.mem_size_mib within limits.max_memory_mb',
    bad: '[limits]\nmax_memory_mb = 512\n[machine]\nmem_size_mib = 1024',
    message: 'machine.mem_size_mib = 1024: must be <= limits.max_memory_mb (512)',
    good: '[limits]\nmax_memory_mb = 1024\n[machine]\nmem_size_mib = 1024',
  },
  {
    name: 'runtime.default_disk_size_mb within limits.max_disk_size_mb',
    bad: '[limits]\nmax_disk_size_mb = 10240',
    message: 'runtime.default_disk_size_mb = 20480: must be <= limits.max_disk_size_mb (10240)',
    good: '[limits]\nmax_disk_size_mb = 20480',
  },
  {
    name: 'a fork fits max_concurrent_creates',
    bad: '[limits]\nmax_fork_count = 10\nmax_concurrent_creates = 4',
    message: 'limits.max_fork_count = 10: must be <= limits.max_concurrent_creates (4)',
    good: '[limits]\nmax_fork_count = 4\nmax_concurrent_creates = 4',
  },
  {
    name: 'pids_limit fits in node_pids_limit',
    bad: '[runtime]\nnode_pids_limit = 500\npids_limit = 600',
    message:
      'runtime.pids_limit = 600: must not exceed runtime.node_pids_limit (500), the budget of all sandboxes together',
    good: '[runtime]\nnode_pids_limit = 500\npids_limit = 400',
  },
  {
    name: 'lazy_restore_min_mib is a whole number >= 0',
    bad: '[runtime]\nlazy_restore_min_mib = -1',
    message: 'runtime.lazy_restore_min_mib = -1: must be >= 0',
    good: '[runtime]\nlazy_restore_min_mib = 0',
  },
  {
    name: 'lazy_restore_min_mib at most 1 TiB',
    bad: '[runtime]\nlazy_restore_min_mib = 1048577',
    message: 'runtime.lazy_restore_min_mib = 1048577: must be <= 1048576',
    good: '[runtime]\nlazy_restore_min_mib = 1048576',
  },
  {
    name: 'lazy_restore_min_mib is no string',
    bad: '[runtime]\nlazy_restore_min_mib = "256"',
    message: 'runtime.lazy_restore_min_mib = "256": expected an integer',
    good: '[runtime]\nlazy_restore_min_mib = 256',
  },
];

describe('validation rules (docs/configuration.md and aenv)', () => {
  for (const r of rules) {
    it(r.name, () => {
      expect(errorOf(r.bad).message).toContain(r.message);
      expect(() => load(r.good)).not.toThrow();
    });
  }

  it('reports every problem at once, one per line', () => {
    const e = errorOf('[pool.firecracker]\nfill_concurrency = 0\n[ublk.overlaybd]\nresize_timeout_secs = 0');
    expect(e.issues.map((i) => i.key)).toEqual([
      'pool.firecracker.fill_concurrency',
      'ublk.overlaybd.resize_timeout_secs',
    ]);
    expect(e.message.split('\n')).toHaveLength(2);
  });

  it('compares overlaybd config paths after resolving symlinks', () => {
    const real = join(dir, 'ob-real');
    mkdirSync(real, { recursive: true });
    symlinkSync(real, join(dir, 'ob-link'));
    const bad =
      `[ublk.overlaybd]\nglobal_config_path = ${JSON.stringify(join(real, 'g.json'))}\n` +
      `[memory_snapshot]\noverlaybd_global_config_path = ${JSON.stringify(join(dir, 'ob-link', 'g.json'))}`;
    expect(errorOf(bad).message).toContain('memory_snapshot.overlaybd_global_config_path = ');
    expect(errorOf(bad).message).toContain(
      `must differ from ublk.overlaybd.global_config_path (${join(real, 'g.json')})`,
    );
  });

  it('pvm with dirty-page tracking is rejected by validation (loading normalises it to false first)', () => {
    const loaded = load('virtualization_mode = "pvm"\n[memory_snapshot]\ntrack_dirty_pages = true');
    expect(loaded.config.memory_snapshot.track_dirty_pages).toBe(false);
    expect(loaded.warnings).toContain(
      'memory_snapshot.track_dirty_pages = true is ignored with virtualization_mode = "pvm" (forced false)',
    );
    const raw = structuredClone(load('').config) as MutableConfig;
    raw.virtualization_mode = 'pvm';
    raw.memory_snapshot.track_dirty_pages = true;
    const issues = validateConfig(raw, () => undefined);
    expect(issues.map((i) => `${i.key}: ${i.rule}`)).toEqual([
      'memory_snapshot.track_dirty_pages: must be false with virtualization_mode = "pvm"',
    ]);
    raw.memory_snapshot.track_dirty_pages = false;
    expect(validateConfig(raw, () => undefined)).toEqual([]);
  });

  it('names the source of a bad value that came from the environment', () => {
    expect(errorOf('', { AENV_OBSERVABILITY_REPORT_INTERVAL_SECS: '0' }).message).toBe(
      'observability.scheduler_report.interval_secs = 0: must be >= 1 (from env AENV_OBSERVABILITY_REPORT_INTERVAL_SECS)',
    );
  });

  it('covers every key of the schema in the default file without a rule firing', () => {
    expect(CONFIG_FIELDS.length).toBeGreaterThan(100);
    expect(load('').warnings).toEqual([]);
  });
});
