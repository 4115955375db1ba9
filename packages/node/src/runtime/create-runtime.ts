// The one place that picks the runtime driver: `virtualization_mode` names it, each driver folder under
// drivers/ builds itself from the configuration. The rest of the node only sees `Runtime`.
import { ConfigError, type AenvConfig } from '@aenv/config';
import type { StateDb } from '../state/db.js';
import type { Logger } from '../util/log.js';
import type { RuntimeDriver, VolumeDisks } from './driver.js';
import type { IdRangeAllocator } from './drivers/container/id-range-allocator.js';
import { createContainerRuntime } from './drivers/container/from-config.js';

export interface RuntimeDeps {
  /** Holds which sandbox owns which host uid/gid range (see docs/security.md, "uid isolation"). */
  db: StateDb;
  logger: Logger;
  /** The node's egress CA (PEM), added to every sandbox's trust store at boot (docs/networking.md). */
  trustedCaPem?: string;
}

/** A started driver and what the rest of the node takes from it. */
export interface Runtime {
  driver: RuntimeDriver;
  /** Each sandbox's own host uid/gid range, held by its sandbox id. */
  idRanges: IdRangeAllocator;
  /** Versions of the driver's host components, recorded with every capture beside envd's and the tools'. */
  versions: Record<string, string>;
  /** The task limit of each sandbox, its share of the node's budget. */
  pidsPerSandbox: number;
  /** The cgroup under which sandboxes get theirs, and the directory of their disks (usage sampling). */
  cgroupParent: string;
  sandboxesDir: string;
  /** Where persistent volumes live (docs/volumes.md). */
  volumeDisks: VolumeDisks;
}

export type VirtualizationMode = AenvConfig['virtualization_mode'];

type RuntimeFactory = (config: AenvConfig, deps: RuntimeDeps) => Promise<Runtime>;

const FACTORIES: Partial<Record<VirtualizationMode, RuntimeFactory>> = {
  container: createContainerRuntime,
};

/**
 * The factory of `mode`; a mode this build has no driver for is a configuration error naming the key, so
 * `aenv server` refuses it before it touches the host.
 */
export function runtimeFactory(mode: VirtualizationMode): RuntimeFactory {
  const factory = FACTORIES[mode];
  if (factory) return factory;
  const built = Object.keys(FACTORIES)
    .map((m) => `"${m}"`)
    .join(', ');
  throw new ConfigError([
    {
      key: 'virtualization_mode',
      value: mode,
      hasValue: true,
      rule: `this build has no driver for it (only ${built}); set virtualization_mode = "container" (or AENV_VIRTUALIZATION_MODE=container)`,
    },
  ]);
}

/** Builds and initialises the driver `config.virtualization_mode` names (host checks, storage). */
export async function createRuntime(config: AenvConfig, deps: RuntimeDeps): Promise<Runtime> {
  return runtimeFactory(config.virtualization_mode)(config, deps);
}
