// The container driver built from `[runtime]` and the node's paths: what `createRuntime` runs for
// virtualization_mode = "container".
import type { AenvConfig } from '@aenv/config';
import type { Runtime, RuntimeDeps } from '../../create-runtime.js';
import { ContainerDriver } from './container-driver.js';
import { defaultCriuPath } from './criu.js';
import { IdRangeAllocator } from './id-range-allocator.js';
import { readPidMax, resolvePidsBudget } from './pids-budget.js';

export async function createContainerRuntime(config: AenvConfig, deps: RuntimeDeps): Promise<Runtime> {
  const pids = resolvePidsBudget(
    { node: config.runtime.node_pids_limit, perSandbox: config.runtime.pids_limit },
    await readPidMax(),
  );
  const driver = new ContainerDriver({
    homePath: config.home_path,
    runtimePath: config.runtime_path,
    runcPath: config.runtime.runc_path,
    criuPath: config.runtime.criu_path || defaultCriuPath(config.deps_path),
    uidMapHostStart: config.runtime.uid_map_host_start,
    uidMapSize: config.runtime.uid_map_size,
    uidRanges: config.runtime.uid_ranges,
    cowVolume: config.runtime.cow_volume,
    cowVolumeSizeGb: config.runtime.cow_volume_size_gb,
    diskLimits: config.runtime.disk_limits,
    cgroupParent: config.resource_prefix,
    nodePidsLimit: pids.node,
    nofileLimit: config.runtime.nofile_limit,
    inotifyMaxInstances: config.runtime.inotify_max_instances,
    inotifyMaxWatches: config.runtime.inotify_max_watches,
    seccompProfilePath: config.runtime.seccomp_profile,
    nestedContainers: config.runtime.nested_containers,
    capNetRaw: config.runtime.cap_net_raw,
    noNewPrivileges: config.runtime.no_new_privileges,
    lazyRestoreMinMib: config.runtime.lazy_restore_min_mib,
    logger: deps.logger,
    ...(deps.trustedCaPem ? { trustedCaPem: deps.trustedCaPem } : {}),
  });
  await driver.init();
  return {
    driver,
    idRanges: new IdRangeAllocator(deps.db, driver.idLayout),
    versions: driver.criuVersion ? { criu: driver.criuVersion } : {},
    pidsPerSandbox: pids.perSandbox,
    cgroupParent: driver.cgroupParent,
    sandboxesDir: driver.sandboxesDir,
    volumeDisks: driver.volumeDisks(),
  };
}
