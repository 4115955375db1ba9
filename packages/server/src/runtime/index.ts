export * from './driver.js';
export { ContainerDriver, CHECKPOINT_META_FILE } from './drivers/container/container-driver.js';
export type {
  ContainerDriverOptions,
  Logger as RuntimeLogger,
} from './drivers/container/container-driver.js';
export type { CowKind, CowVolumeMode } from './drivers/container/cow-volume.js';
export { defaultCriuPath } from './drivers/container/criu.js';
export { readPidMax, resolvePidsBudget } from './drivers/container/pids-budget.js';
