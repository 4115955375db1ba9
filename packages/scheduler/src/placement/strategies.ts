import type { ScheduleRequestHint } from '@aenv/protocol';
import type { StrategyName } from '../config/cluster-config.js';
import type { CandidateNode, NodeRef } from '../registry/node-registry.js';

export class NoNodesError extends Error {
  constructor() {
    super('no nodes available');
  }
}

/** Picks one node of the eligible ones (already filtered, sorted by id). */
export interface Strategy {
  readonly name: StrategyName;
  select(nodes: readonly CandidateNode[], hint: ScheduleRequestHint | undefined): NodeRef;
  /** A node's heartbeat arrived: its figures now include what was placed on it before. */
  onHeartbeat?(nodeId: string): void;
}

/** The reference's default: a counter walks the eligible list. */
export class RoundRobinStrategy implements Strategy {
  readonly name = 'round_robin';
  #next = 0;

  select(nodes: readonly CandidateNode[], _hint?: ScheduleRequestHint): NodeRef {
    if (nodes.length === 0) throw new NoNodesError();
    const i = this.#next % nodes.length;
    this.#next = (this.#next + 1) % Number.MAX_SAFE_INTEGER;
    return nodes[i]!.node;
  }
}

export class RandomStrategy implements Strategy {
  readonly name = 'random';

  constructor(private readonly random: () => number = Math.random) {}

  select(nodes: readonly CandidateNode[], _hint?: ScheduleRequestHint): NodeRef {
    if (nodes.length === 0) throw new NoNodesError();
    return nodes[Math.min(nodes.length - 1, Math.floor(this.random() * nodes.length))]!.node;
  }
}

const MIB = 1024 * 1024;
/** E2B's default sandbox size, assumed when a request does not say (docs/cluster.md#least_allocated). */
export const DEFAULT_SANDBOX_CPU = 2;
export const DEFAULT_SANDBOX_MEMORY_BYTES = 1024 * MIB;

interface Demand {
  cpu: number;
  /** A double: exact below 8 PiB, and cheaper than BigInt on the Schedule path. */
  memoryBytes: number;
}

/**
 * aenv's own strategy (docs/cluster.md#least_allocated): the node whose busier resource — allocated CPU over
 * its CPU count, or allocated memory over its memory — would be lowest after taking this sandbox wins.
 * A cold hint brings its cpu_count/memory_mb; any other request counts as the node's average running
 * sandbox (or E2B's default 2 vCPU / 1 GiB). Placements since a node's last heartbeat are added to its
 * figures, so a burst of creates between two heartbeats spreads out. Nodes without figures come last;
 * equal scores take turns.
 */
export class LeastAllocatedStrategy implements Strategy {
  readonly name = 'least_allocated';
  #pending = new Map<string, Demand>();
  #turn = 0;

  select(nodes: readonly CandidateNode[], hint: ScheduleRequestHint | undefined): NodeRef {
    if (nodes.length === 0) throw new NoNodesError();
    const cold = coldDemand(hint);
    let best: CandidateNode[] = [];
    let bestScore = Infinity;
    for (const node of nodes) {
      const score = this.#score(node, cold);
      if (score < bestScore) {
        bestScore = score;
        best = [node];
      } else if (score === bestScore) best.push(node);
    }
    const pick = best[this.#turn++ % best.length]!;
    this.#turn %= Number.MAX_SAFE_INTEGER;
    const demand = cold ?? averageDemand(pick);
    const pending = this.#pending.get(pick.node.id);
    if (pending) {
      pending.cpu += demand.cpu;
      pending.memoryBytes += demand.memoryBytes;
    } else this.#pending.set(pick.node.id, { ...demand });
    return pick.node;
  }

  onHeartbeat(nodeId: string): void {
    this.#pending.delete(nodeId);
  }

  #score(node: CandidateNode, cold: Demand | undefined): number {
    const s = node.snapshot;
    const memoryTotal = s ? s.memoryTotalBytes : 0;
    if (!s || (s.cpuCount === 0 && memoryTotal === 0)) return Number.MAX_VALUE;
    const pending = this.#pending.get(node.node.id);
    let cpu = DEFAULT_SANDBOX_CPU;
    let memoryBytes = DEFAULT_SANDBOX_MEMORY_BYTES;
    if (cold) ({ cpu, memoryBytes } = cold);
    else if (s.sandboxCount > 0) {
      cpu = s.allocatedCpu / s.sandboxCount;
      memoryBytes = s.allocatedMemoryBytes / s.sandboxCount;
    }
    let score = 0;
    if (s.cpuCount > 0) score = (s.allocatedCpu + (pending?.cpu ?? 0) + cpu) / s.cpuCount;
    if (memoryTotal > 0) {
      const memory = s.allocatedMemoryBytes + (pending?.memoryBytes ?? 0) + memoryBytes;
      score = Math.max(score, memory / memoryTotal);
    }
    return score;
  }
}

/** What a cold hint asks for; undefined for other requests (sized per node). */
function coldDemand(hint: ScheduleRequestHint | undefined): Demand | undefined {
  if (hint?.kind.case !== 'newColdSandbox') return undefined;
  const cold = hint.kind.value;
  return {
    cpu: cold.cpuCount > 0 ? cold.cpuCount : DEFAULT_SANDBOX_CPU,
    memoryBytes: cold.memoryMb > 0n ? Number(cold.memoryMb) * MIB : DEFAULT_SANDBOX_MEMORY_BYTES,
  };
}

/** The node's average running sandbox, or the default size on a node running none. */
function averageDemand(node: CandidateNode): Demand {
  const s = node.snapshot;
  if (s && s.sandboxCount > 0)
    return {
      cpu: s.allocatedCpu / s.sandboxCount,
      memoryBytes: s.allocatedMemoryBytes / s.sandboxCount,
    };
  return { cpu: DEFAULT_SANDBOX_CPU, memoryBytes: DEFAULT_SANDBOX_MEMORY_BYTES };
}

export function createStrategy(name: StrategyName): Strategy {
  switch (name) {
    case 'random':
      return new RandomStrategy();
    case 'least_allocated':
      return new LeastAllocatedStrategy();
    default:
      return new RoundRobinStrategy();
  }
}
