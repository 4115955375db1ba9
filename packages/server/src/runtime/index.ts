export * from './driver.js';
export { ContainerDriver, CHECKPOINT_META_FILE } from './container/container-driver.js';
export type { ContainerDriverOptions, Logger as RuntimeLogger } from './container/container-driver.js';
export type { CowKind, CowVolumeMode } from './container/cow-volume.js';
export { defaultCriuPath } from './container/criu.js';
export { readPidMax, resolvePidsBudget } from './container/pids-budget.js';
