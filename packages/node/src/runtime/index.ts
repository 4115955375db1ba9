export * from './driver.js';
export { createRuntime, runtimeFactory } from './create-runtime.js';
export type { Runtime, RuntimeDeps, VirtualizationMode } from './create-runtime.js';
export { idRangeMigrations } from './drivers/container/id-range-allocator.js';
export type { IdRangeAllocator } from './drivers/container/id-range-allocator.js';
