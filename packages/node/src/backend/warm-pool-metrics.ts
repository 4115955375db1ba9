// Prometheus metrics of the warm sandbox pool (docs/operations.md lists every metric), per template.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { WarmPoolStats } from './warm-pool.js';

export interface WarmPoolMetricsSource {
  stats(): WarmPoolStats[];
  /** Memory charged to the cgroups of the ready sandboxes, bytes (read at scrape time). */
  memoryBytes(): Promise<number>;
}

export class WarmPoolMetrics {
  private readonly creates: Counter<'template' | 'result'>;
  private readonly warmUps: Counter<'template' | 'result'>;
  private readonly fills: Counter<'template' | 'source'>;

  constructor(registry: Registry, source: WarmPoolMetricsSource) {
    const registers = [registry];
    this.creates = new Counter({
      name: 'aenv_warm_pool_creates_total',
      help: 'Creates that asked the warm sandbox pool, by template and result (hit: served from it, miss: booted)',
      labelNames: ['template', 'result'],
      registers,
    });
    this.warmUps = new Counter({
      name: 'aenv_warm_pool_warm_ups_total',
      help: 'Warm-ups of pre-started sandboxes (a command and a file read through envd) by template and result (ok, failed)',
      labelNames: ['template', 'result'],
      registers,
    });
    this.fills = new Counter({
      name: 'aenv_warm_pool_fills_total',
      help: "Pre-started sandboxes made for the warm pool, by template and source (start_capture: restored from the template's start capture, boot: booted and warmed up)",
      labelNames: ['template', 'source'],
      registers,
    });
    new Gauge({
      name: 'aenv_warm_pool_sandboxes',
      help: 'Pre-started sandboxes in the warm pool by template and state (ready, booting)',
      labelNames: ['template', 'state'],
      registers,
      collect() {
        this.reset();
        for (const s of source.stats()) {
          this.inc({ template: s.label, state: 'ready' }, s.ready);
          this.inc({ template: s.label, state: 'booting' }, s.booting);
        }
      },
    });
    new Gauge({
      name: 'aenv_warm_pool_target',
      help: 'Refill target of the warm sandbox pool by template (low watermark .. high watermark)',
      labelNames: ['template'],
      registers,
      collect() {
        this.reset();
        for (const s of source.stats()) this.inc({ template: s.label }, s.target);
      },
    });
    new Gauge({
      name: 'aenv_warm_pool_memory_bytes',
      help: 'Memory charged to the cgroups of the ready sandboxes in the warm pool',
      registers,
      async collect() {
        this.set(await source.memoryBytes());
      },
    });
  }

  onCreate(template: string, hit: boolean): void {
    this.creates.inc({ template, result: hit ? 'hit' : 'miss' });
  }

  onFill(template: string, source: 'start_capture' | 'boot'): void {
    this.fills.inc({ template, source });
  }

  onWarmUp(template: string, ok: boolean): void {
    this.warmUps.inc({ template, result: ok ? 'ok' : 'failed' });
  }
}
