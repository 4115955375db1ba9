export { volumeMigrations } from './catalog.js';
export { VolumeService, type VolumeAndToken, type VolumeSettings } from './service.js';
export { volumeSettings } from './settings.js';
export type { VolumeMountRecord } from './types.js';
