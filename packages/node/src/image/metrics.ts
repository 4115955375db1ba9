// Prometheus metrics of the image cache, registered on an injected prom-client Registry.

import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

export class ImageMetrics {
  readonly cacheBytes: Gauge;
  readonly hits: Counter<'kind'>;
  readonly misses: Counter<'kind'>;
  readonly evictions: Counter;
  readonly layersDeleted: Counter;
  readonly pullDuration: Histogram<'result'>;
  readonly gcRuns: Counter<'result'>;

  constructor(registry?: Registry) {
    const registers = registry ? [registry] : [];
    this.cacheBytes = new Gauge({
      name: 'aenv_image_cache_bytes',
      help: 'Disk space used by unpacked image layers (apparent size in 4 KiB blocks)',
      registers,
    });
    this.hits = new Counter({
      name: 'aenv_image_cache_hits_total',
      help: 'Images / layers found in the cache when pulled',
      labelNames: ['kind'],
      registers,
    });
    this.misses = new Counter({
      name: 'aenv_image_cache_misses_total',
      help: 'Images / layers that had to be downloaded',
      labelNames: ['kind'],
      registers,
    });
    this.evictions = new Counter({
      name: 'aenv_image_cache_evictions_total',
      help: 'Images evicted by the LRU capacity policy',
      registers,
    });
    this.layersDeleted = new Counter({
      name: 'aenv_image_cache_layers_deleted_total',
      help: 'Unreferenced layers deleted by GC',
      registers,
    });
    this.pullDuration = new Histogram({
      name: 'aenv_image_pull_duration_seconds',
      help: 'Duration of image pulls (cache hits included)',
      labelNames: ['result'],
      buckets: [0.01, 0.05, 0.25, 1, 2.5, 5, 10, 30, 60, 180, 600],
      registers,
    });
    this.gcRuns = new Counter({
      name: 'aenv_image_gc_runs_total',
      help: 'Image cache GC passes by result (ok, reconcile_failed, error)',
      labelNames: ['result'],
      registers,
    });
  }
}
