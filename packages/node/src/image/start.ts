import type { AenvConfig } from '@aenv/config';
import type { Registry } from 'prom-client';
import type { StateDb } from '../state/db.js';
import type { Logger } from '../util/log.js';
import type { Subsystem } from '../util/subsystem.js';
import { ImageService } from './image-service.js';

export interface ImagesDeps {
  db: StateDb;
  logger: Logger;
  registry: Registry;
}

/**
 * `[image]`: the image cache, initialised (its garbage collector starts with `images.start()`). Layers are
 * unpacked owned by the host uid range of `[runtime].uid_map_*`.
 */
export async function startImages(
  config: Pick<AenvConfig, 'image' | 'runtime'>,
  deps: ImagesDeps,
): Promise<Subsystem & { images: ImageService }> {
  const image = config.image;
  const images = new ImageService({
    rootDir: image.cache.root_dir,
    db: deps.db,
    resolver: {
      defaultImage: image.resolver.default_image,
      searchRegistries: image.resolver.search_registries,
      allowedRegistries: image.resolver.allowed_registries,
      convertStandardOci: image.resolver.convert_standard_oci,
      tryReferrersOverlaybdPrefixes: image.resolver.try_referrers_overlaybd_prefixes,
      localImageDirs: image.resolver.local_image_dirs,
    },
    limits: {
      maxLayerBytes: image.limits.max_layer_mb * 1024 ** 2,
      maxImageBytes: image.limits.max_image_mb * 1024 ** 2,
      maxLayerEntries: image.limits.max_layer_entries,
    },
    gc: {
      enabled: image.cache.gc.enabled,
      intervalSecs: image.cache.gc.interval_secs,
      minAgeSecs: image.cache.gc.min_age_secs,
      highWatermarkRatio: image.cache.gc.high_watermark_ratio,
      lowWatermarkRatio: image.cache.gc.low_watermark_ratio,
    },
    capacityGb: image.cache.capacity_gb,
    insecureRegistries: image.resolver.insecure_registries,
    registryEndpoints: Object.fromEntries(
      image.resolver.registry_endpoints.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]),
    ),
    uidShift: config.runtime.uid_map_host_start,
    uidRangeSize: config.runtime.uid_map_size,
    logger: deps.logger.child({ component: 'images' }),
    metricsRegistry: deps.registry,
  });
  await images.init();
  return { images, close: () => images.stop() };
}
