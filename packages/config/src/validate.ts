import { basename, dirname, isAbsolute, join } from 'node:path';
import { cidrsOverlap, parseIpv4Cidr, type Ipv4Cidr } from './cidr.js';
import { cidrSize } from './ip.js';
import { issue, missing, type ConfigIssue, type ValueSource } from './errors.js';
import type { MutableConfig } from './types.js';
import { canonicalPath } from './paths.js';

const MIB = 1024 * 1024;
const GIB = 1024 * MIB;
/** Fixed link between a microVM and its tap device (docs/networking.md). */
const VM_LINK_CIDR = '169.254.0.20/30';
const SEMVER_NO_BUILD = /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$/;

/**
 * Rules that span keys or need the resolved configuration (docs/configuration.md#validation-startup-fails).
 * Per-key type/range rules live in the schema.
 */
export function validateConfig(
  c: MutableConfig,
  sourceOf: (key: string) => ValueSource | undefined,
): ConfigIssue[] {
  const out: ConfigIssue[] = [];
  const bad = (key: string, value: unknown, rule: string) => out.push(issue(key, value, rule, sourceOf(key)));

  // Pools: low <= high for every pool that is in use; fill_concurrency > 0.
  const pools: string[] = [];
  if (c.pool.network.maintenance_enabled) pools.push('pool.network');
  if (c.pool.block.enabled) pools.push('pool.block');
  if (c.pool.firecracker.enabled) pools.push('pool.firecracker');
  if (pools.length > 0 && c.pool.low_watermark > c.pool.high_watermark) {
    bad(
      'pool.low_watermark',
      c.pool.low_watermark,
      `must be <= pool.high_watermark (${c.pool.high_watermark}) while ${pools.join(', ')} ${pools.length > 1 ? 'are' : 'is'} enabled`,
    );
  }
  if (c.pool.warm_sandboxes > c.pool.high_watermark) {
    bad(
      'pool.warm_sandboxes',
      c.pool.warm_sandboxes,
      `must be <= pool.high_watermark (${c.pool.high_watermark}): it is the warm sandbox pool's low watermark (0 disables the pool)`,
    );
  }
  const memRatio = c.pool.sandbox_min_available_memory_ratio;
  if (!Number.isFinite(memRatio) || memRatio < 0 || memRatio >= 1) {
    bad('pool.sandbox_min_available_memory_ratio', memRatio, 'must be a finite number with 0 <= ratio < 1');
  }
  if (c.pool.firecracker.fill_concurrency <= 0) {
    bad('pool.firecracker.fill_concurrency', c.pool.firecracker.fill_concurrency, 'must be > 0');
  }

  // Image cache GC ratios.
  const gc = c.image.cache.gc;
  let ratiosValid = true;
  for (const name of ['high_watermark_ratio', 'low_watermark_ratio'] as const) {
    const r = gc[name];
    if (!Number.isFinite(r) || r <= 0 || r > 1) {
      bad(`image.cache.gc.${name}`, r, 'must be a finite number with 0 < ratio <= 1');
      ratiosValid = false;
    }
  }
  if (ratiosValid && gc.low_watermark_ratio > gc.high_watermark_ratio) {
    bad(
      'image.cache.gc.low_watermark_ratio',
      gc.low_watermark_ratio,
      `must be <= high_watermark_ratio (${gc.high_watermark_ratio})`,
    );
  }

  // Network: egress denies and internal pools.
  c.image.resolver.registry_endpoints.forEach((text, i) => {
    const eq = text.indexOf('=');
    const url = eq > 0 ? text.slice(eq + 1) : '';
    if (eq <= 0 || !/^https?:\/\/[^\s/]+/.test(url)) {
      bad(`image.resolver.registry_endpoints[${i}]`, text, 'must be "<registry>=<http(s) URL>"');
    }
  });
  c.network.egress.always_denied_cidrs.forEach((text, i) => {
    const parsed = parseIpv4Cidr(text);
    if ('error' in parsed) bad(`network.egress.always_denied_cidrs[${i}]`, text, parsed.error);
  });
  const internal: [string, string, Ipv4Cidr | undefined][] = [];
  const pool = (key: string, text: string, minAddrs: number) => {
    const parsed = parseIpv4Cidr(text);
    if ('error' in parsed) return bad(key, text, parsed.error);
    if (cidrSize(parsed) < minAddrs) {
      return bad(
        key,
        text,
        `must hold at least ${minAddrs} addresses (prefix /${32 - Math.log2(minAddrs)} or shorter)`,
      );
    }
    internal.push([key, text, parsed]);
  };
  pool('network.internal.host_interaction_cidr', c.network.internal.host_interaction_cidr, 32768);
  pool('network.internal.veth_cidr', c.network.internal.veth_cidr, 65536);
  internal.push(['the fixed VM link', VM_LINK_CIDR, parseIpv4Cidr(VM_LINK_CIDR) as Ipv4Cidr]);
  for (let i = 0; i < internal.length; i++) {
    for (let j = i + 1; j < internal.length; j++) {
      const [ka, ta, a] = internal[i]!;
      const [kb, tb, b] = internal[j]!;
      if (a && b && cidrsOverlap(a, b)) bad(ka, ta, `must not overlap ${kb} (${tb})`);
    }
  }

  // ublk / overlaybd.
  if (c.ublk.overlaybd.resize_timeout_secs <= 0) {
    bad('ublk.overlaybd.resize_timeout_secs', c.ublk.overlaybd.resize_timeout_secs, 'must be > 0');
  }
  checkOverlaybdConfigPaths(c, bad);

  // Memory snapshots.
  if (c.virtualization_mode === 'pvm' && c.memory_snapshot.track_dirty_pages) {
    bad('memory_snapshot.track_dirty_pages', true, 'must be false with virtualization_mode = "pvm"');
  }
  const bd = c.memory_snapshot.background_download;
  const bdKey = (k: string) => `memory_snapshot.background_download.${k}`;
  let bdSizesValid = true;
  if (bd.concurrency < 1 || bd.concurrency > 16) {
    bad(bdKey('concurrency'), bd.concurrency, 'must be between 1 and 16');
    bdSizesValid = false;
  }
  if (bd.block_size < 1 || bd.block_size > 64 * MIB) {
    bad(bdKey('block_size'), bd.block_size, `must be between 1 and ${64 * MIB} (64 MiB)`);
    bdSizesValid = false;
  }
  if (bd.max_inflight_blocks < 1 || bd.max_inflight_blocks > 128) {
    bad(bdKey('max_inflight_blocks'), bd.max_inflight_blocks, 'must be between 1 and 128');
    bdSizesValid = false;
  }
  if (bdSizesValid && bd.block_size * bd.concurrency > 256 * MIB) {
    bad(
      bdKey('block_size'),
      bd.block_size,
      `times concurrency (${bd.concurrency}) must be <= ${256 * MIB} (256 MiB)`,
    );
  }
  if (bdSizesValid && bd.block_size * bd.max_inflight_blocks > 2 * GIB) {
    bad(
      bdKey('block_size'),
      bd.block_size,
      `times max_inflight_blocks (${bd.max_inflight_blocks}) must be <= ${2 * GIB} (2 GiB)`,
    );
  }
  if (bd.delay < 0) bad(bdKey('delay'), bd.delay, 'must be >= 0');
  if (bd.try_cnt < 1) bad(bdKey('try_cnt'), bd.try_cnt, 'must be >= 1');

  // Disk rate limits (only when enabled). Values above 2^53 cannot be read at all, so <= i64::MAX holds.
  const rl = c.machine.disk_rate_limit;
  if (rl.enabled) {
    const rlKey = (k: string) => `machine.disk_rate_limit.${k}`;
    if (rl.bandwidth_burst_bytes > 0 && rl.bandwidth_bytes_per_sec === 0) {
      bad(
        rlKey('bandwidth_burst_bytes'),
        rl.bandwidth_burst_bytes,
        'requires a nonzero bandwidth_bytes_per_sec',
      );
    }
    if (rl.iops_burst > 0 && rl.iops === 0)
      bad(rlKey('iops_burst'), rl.iops_burst, 'requires a nonzero iops');
  }

  // Local image directories: absolute, and not "/" (that would let the build API read any host file).
  c.image.resolver.local_image_dirs.forEach((dir, i) => {
    if (!isAbsolute(dir) || dir.split('/').includes('..')) {
      bad(`image.resolver.local_image_dirs[${i}]`, dir, 'must be an absolute path without ".."');
    } else if (dir === '/') {
      bad(
        `image.resolver.local_image_dirs[${i}]`,
        dir,
        'must not be "/" (name the directories that hold image layouts)',
      );
    }
  });

  if (c.snapshot.record_signing_secret === '') {
    bad('snapshot.record_signing_secret', '', 'must not be empty when set (unset it to use the managed key)');
  }

  // Access-token seed: when configured it must be non-empty after trimming.
  if (c.sandbox.access_token_hash_seed === '') {
    bad(
      'sandbox.access_token_hash_seed',
      '',
      'must not be empty when set (unset it to use the managed seed)',
    );
  }

  // Tools drive override: drive_path/url need an explicit SemVer version without build metadata.
  const tools = c.tools;
  if ((tools.drive_path !== undefined || tools.url !== undefined) && tools.version === undefined) {
    out.push(
      missing(
        'tools.version',
        `required when tools.${tools.drive_path !== undefined ? 'drive_path' : 'url'} is set`,
      ),
    );
  }
  if (tools.version !== undefined && !SEMVER_NO_BUILD.test(tools.version)) {
    bad(
      'tools.version',
      tools.version,
      'must be a SemVer version without build metadata (e.g. "0.1.0" or "0.1.0-custom.1")',
    );
  }

  // overlaybd tools override needs a version too.
  const ob = c.overlaybd;
  if ((ob.url !== undefined || ob.package_url !== undefined) && ob.version === undefined) {
    out.push(
      missing(
        'overlaybd.version',
        `required when overlaybd.${ob.url !== undefined ? 'url' : 'package_url'} is set`,
      ),
    );
  }

  // Snapshot repository backend.
  if (c.snapshot.repository_backend === 'oss') {
    const oss = c.backend.oss;
    for (const k of ['endpoint', 'bucket', 'region'] as const) {
      if (oss[k] === undefined)
        out.push(missing(`backend.oss.${k}`, 'required when snapshot.repository_backend = "oss"'));
    }
    if ((oss.access_key_id === undefined) !== (oss.access_key_secret === undefined)) {
      const unset = oss.access_key_id === undefined ? 'access_key_id' : 'access_key_secret';
      const set = unset === 'access_key_id' ? 'access_key_secret' : 'access_key_id';
      out.push(missing(`backend.oss.${unset}`, `required when backend.oss.${set} is set`));
    }
  }

  // aenv: container driver.
  const rt = c.runtime;
  if (rt.uid_map_host_start + rt.uid_map_size * (1 + rt.uid_ranges) > 2 ** 32 - 1) {
    bad(
      'runtime.uid_ranges',
      rt.uid_ranges,
      `with uid_map_host_start (${rt.uid_map_host_start}) and uid_map_size (${rt.uid_map_size}) the uid span must stay below 4294967295`,
    );
  }
  if (rt.default_disk_size_mb % 1024 !== 0)
    bad('runtime.default_disk_size_mb', rt.default_disk_size_mb, 'must be a multiple of 1024');
  if (rt.node_pids_limit > 0 && rt.pids_limit > rt.node_pids_limit) {
    bad(
      'runtime.pids_limit',
      rt.pids_limit,
      `must not exceed runtime.node_pids_limit (${rt.node_pids_limit}), the budget of all sandboxes together`,
    );
  }

  // aenv: admission limits. The node's own defaults must be admissible, and one fork must fit.
  const lim = c.limits;
  if (lim.max_cpu_count > 0 && c.machine.vcpu_count > lim.max_cpu_count)
    bad('machine.vcpu_count', c.machine.vcpu_count, `must be <= limits.max_cpu_count (${lim.max_cpu_count})`);
  if (lim.max_memory_mb > 0 && c.machine.mem_size_mib > lim.max_memory_mb)
    bad(
      'machine.mem_size_mib',
      c.machine.mem_size_mib,
      `must be <= limits.max_memory_mb (${lim.max_memory_mb})`,
    );
  if (rt.default_disk_size_mb > lim.max_disk_size_mb) {
    bad(
      'runtime.default_disk_size_mb',
      rt.default_disk_size_mb,
      `must be <= limits.max_disk_size_mb (${lim.max_disk_size_mb})`,
    );
  }
  if (lim.max_fork_count > lim.max_concurrent_creates) {
    bad(
      'limits.max_fork_count',
      lim.max_fork_count,
      `must be <= limits.max_concurrent_creates (${lim.max_concurrent_creates})`,
    );
  }

  return out;
}

type Bad = (key: string, value: unknown, rule: string) => void;

/**
 * The runtime and memory overlaybd configs, and the convert/resize configs derived from the
 * runtime one, are regenerated at startup: they must be four different files, also after
 * resolving symlinks.
 */
function checkOverlaybdConfigPaths(c: MutableConfig, bad: Bad): void {
  const runtime = c.ublk.overlaybd.global_config_path;
  const derived = (prefix: string) => join(dirname(runtime), `${prefix}-${basename(runtime)}`);
  const files: [string, string][] = [
    ['ublk.overlaybd.global_config_path', runtime],
    ['memory_snapshot.overlaybd_global_config_path', c.memory_snapshot.overlaybd_global_config_path],
    ['the derived convert config', derived('convert')],
    ['the derived resize config', derived('resize')],
  ];
  for (let i = 0; i < files.length; i++) {
    for (let j = i + 1; j < files.length; j++) {
      if (files[i]![1] !== files[j]![1] && canonicalPath(files[i]![1]) !== canonicalPath(files[j]![1]))
        continue;
      // Report against a key the operator can change (the first two are configurable).
      const reported = j < 2 ? j : i < 2 ? i : 0;
      const other = reported === j ? i : reported === i ? j : i;
      const [key, value] = files[reported]!;
      const [otherName, otherPath] = files[other]!;
      bad(key, value, `must differ from ${otherName} (${otherPath})`);
    }
  }
}
