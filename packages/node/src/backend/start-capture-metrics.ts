// Prometheus metrics of the start captures (start-captures.ts; docs/operations.md lists every metric).
import { Counter, Gauge, type Registry } from 'prom-client';

export class StartCaptureMetrics {
  private readonly creates: Counter<'template' | 'result'>;

  /** `ready`: the templates that have a start capture on this node now. */
  constructor(registry: Registry, ready: () => string[]) {
    const registers = [registry];
    this.creates = new Counter({
      name: 'aenv_start_capture_creates_total',
      help: "Creates served from a template's start capture, by template and result (restored: its memory came back; booted: the restore failed and the sandbox booted on the capture's disk, which drops the capture)",
      labelNames: ['template', 'result'],
      registers,
    });
    new Gauge({
      name: 'aenv_start_captures',
      help: 'Start captures this node holds, by template (1 while cold creates of it restore one)',
      labelNames: ['template'],
      registers,
      collect() {
        this.reset();
        for (const template of ready()) this.inc({ template }, 1);
      },
    });
  }

  onCreate(template: string, restored: boolean): void {
    this.creates.inc({ template, result: restored ? 'restored' : 'booted' });
  }
}
