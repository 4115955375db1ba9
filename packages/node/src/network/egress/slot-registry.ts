// Which slot a redirected connection or DNS query comes from (by its source address, which the anti-spoof
// rule in nft-rules.ts makes trustworthy), and what that slot's policy allows by name.

import type { RuleMatcher } from './header-rules.js';
import type { EgressPolicy } from '../types.js';

export interface SlotEgress {
  index: number;
  /** allowOut's domain patterns. */
  patterns: readonly string[];
  /** The slot's CIDR policy lets it query the node's upstream resolvers for any name (egress-model `resolverAllowed`). */
  anyName: boolean;
  /** `network.rules` compiled (header-rules.ts); null: nothing of this slot is intercepted. */
  rules?: RuleMatcher | null;
  /**
   * Whether the slot's CIDR policy lets it reach `address` on `port` (egress-model `verdictFor`): a slot sent
   * here for its rules alone may still reach names outside allowOut's domains that way.
   */
  admits?: (address: string, port: number) => boolean;
  /** The whole policy: a slot with an egressProxy is tunneled (tunnel.ts), by name and by address. */
  policy?: EgressPolicy;
}

export class SlotRegistry {
  private readonly bySource = new Map<string, SlotEgress>();
  private readonly sourcesOf = new Map<number, readonly string[]>();

  set(addresses: readonly string[], slot: SlotEgress): void {
    this.delete(slot.index);
    for (const a of addresses) this.bySource.set(a, slot);
    this.sourcesOf.set(slot.index, addresses);
  }

  delete(index: number): void {
    for (const a of this.sourcesOf.get(index) ?? []) this.bySource.delete(a);
    this.sourcesOf.delete(index);
  }

  /** The slot a remote address belongs to (IPv4-mapped IPv6 forms included). */
  bySourceAddress(address: string | undefined): SlotEgress | undefined {
    if (address === undefined) return undefined;
    return this.bySource.get(address.startsWith('::ffff:') ? address.slice(7) : address);
  }

  get(index: number): SlotEgress | undefined {
    const first = this.sourcesOf.get(index)?.[0];
    return first !== undefined ? this.bySource.get(first) : undefined;
  }
}
