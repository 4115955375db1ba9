// Prometheus metrics of the network subsystem (registered only when a registry is given).

import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

export interface PoolCounts {
  ready: number;
  inUse: number;
  target: number;
  leaked: number;
  egressConnections?: number;
  /** Of those, the ones a splice helper copies now. */
  egressSpliced?: number;
}

const BUCKETS = [0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

export class NetworkMetrics {
  readonly slotCreateSeconds: Histogram;
  readonly slotDestroySeconds: Histogram;
  readonly policyApplySeconds: Histogram;
  readonly acquisitions: Counter<'result'>;
  readonly errors: Counter<'op'>;
  readonly flowsCut: Counter;
  readonly egressDecisions: Counter<'kind' | 'verdict'>;

  constructor(registry: Registry | undefined, counts: () => PoolCounts) {
    const registers = registry ? [registry] : [];
    this.slotCreateSeconds = new Histogram({
      name: 'aenv_network_slot_create_seconds',
      help: 'Time to create a network slot (netns, veth, addresses, routes)',
      buckets: BUCKETS,
      registers,
    });
    this.slotDestroySeconds = new Histogram({
      name: 'aenv_network_slot_destroy_seconds',
      help: 'Time to tear down a network slot including its nftables rules',
      buckets: BUCKETS,
      registers,
    });
    this.policyApplySeconds = new Histogram({
      name: 'aenv_network_policy_apply_seconds',
      help: 'Time to install a sandbox egress policy in nftables',
      buckets: BUCKETS,
      registers,
    });
    this.acquisitions = new Counter({
      name: 'aenv_network_slot_acquisitions_total',
      help: 'Slot acquisitions; result="hit" came from the warm pool, "miss" was created on demand',
      labelNames: ['result'],
      registers,
    });
    this.errors = new Counter({
      name: 'aenv_network_errors_total',
      help: 'Failed network operations by operation',
      labelNames: ['op'],
      registers,
    });
    this.flowsCut = new Counter({
      name: 'aenv_network_flows_cut_total',
      help: 'Tracked connections deleted because a replaced egress policy no longer allows them',
      registers,
    });
    this.egressDecisions = new Counter({
      name: 'aenv_network_egress_decisions_total',
      help: 'Domain egress verdicts: connections through the egress proxy (proxied, refused) and sandbox DNS questions (answered, refused)',
      labelNames: ['kind', 'verdict'],
      registers,
    });
    new Gauge({
      name: 'aenv_network_egress_open_connections',
      help: 'Connections open through the egress proxy',
      registers,
      collect() {
        this.set(counts().egressConnections ?? 0);
      },
    });
    new Gauge({
      name: 'aenv_network_egress_spliced_connections',
      help: 'Connections through the egress proxy whose bytes a splice helper copies in the kernel (one process each)',
      registers,
      collect() {
        this.set(counts().egressSpliced ?? 0);
      },
    });
    new Gauge({
      name: 'aenv_network_pool_ready_slots',
      help: 'Pre-created slots waiting in the warm pool',
      registers,
      collect() {
        this.set(counts().ready);
      },
    });
    new Gauge({
      name: 'aenv_network_pool_target_slots',
      help: 'Current refill target of the warm pool',
      registers,
      collect() {
        this.set(counts().target);
      },
    });
    new Gauge({
      name: 'aenv_network_slots_in_use',
      help: 'Slots handed out to sandboxes',
      registers,
      collect() {
        this.set(counts().inUse);
      },
    });
    new Gauge({
      name: 'aenv_network_slots_leaked',
      help: 'Slots whose teardown failed and is being retried in the background',
      registers,
      collect() {
        this.set(counts().leaked);
      },
    });
  }
}
