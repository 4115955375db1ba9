// Public API of the image subsystem.

export { ImageService } from './image-service.js';
export type { ImageServiceOptions, ImageLogger, PullOptions, PullProgress } from './image-service.js';
export { ImageError, isImageError } from './errors.js';
export type { ImageErrorKind } from './errors.js';
export { imageMigrations } from './migrations.js';
export {
  defaultImage,
  normalizeResolverConfig,
  resolveReference,
  DEFAULT_IMAGE,
  DEFAULT_SEARCH_REGISTRIES,
} from './resolver.js';
export type { ResolverConfig, NormalizedResolverConfig, ResolvedReference } from './resolver.js';
export { normalizeGcConfig } from './gc.js';
export type { GcConfig, GcResult } from './gc.js';
export { formatReference, parseLocalReference, parseRegistryReference, qualify } from './reference.js';
export type {
  ImageReference,
  RegistryReference,
  LocalReference,
  ParsedRegistryReference,
} from './reference.js';
export { defaultDockerConfigDir } from './credentials.js';
export type { BasicCredentials } from './credentials.js';
export type { Lease } from './metadata-store.js';
export type { ImageConfig, PulledImage, UnpackedLayer } from './types.js';
