// Address plan of the slots: which addresses slot N gets out of [network.internal].

import { cidrSize, cidrsOverlap, formatCidr, formatIPv4, parseCidr, type Cidr } from '@aenv/config';
import { MAX_SLOT_INDEX } from './names.js';

export interface SlotAddresses {
  /** host_interaction_cidr base + N; lives inside the netns, routed from the host via the veth. */
  hostInteractionIp: string;
  /** veth_cidr base + 2N, host end of the /31. */
  hostLinkIp: string;
  /** veth_cidr base + 2N + 1, `eth0` inside the netns. */
  sandboxLinkIp: string;
}

export class AddressPlan {
  readonly hostInteraction: Cidr;
  readonly veth: Cidr;
  /** Highest usable slot index (slot 0 is reserved). */
  readonly maxIndex: number;

  constructor(hostInteractionCidr: string, vethCidr: string) {
    this.hostInteraction = requireIPv4Cidr(hostInteractionCidr, 'network.internal.host_interaction_cidr');
    this.veth = requireIPv4Cidr(vethCidr, 'network.internal.veth_cidr');
    if (cidrsOverlap(this.hostInteraction, this.veth)) {
      throw new Error(
        `network.internal.host_interaction_cidr ${formatCidr(this.hostInteraction)} overlaps veth_cidr ${formatCidr(this.veth)}`,
      );
    }
    const byHostInteraction = cidrSize(this.hostInteraction) - 1n;
    const byVeth = cidrSize(this.veth) / 2n - 1n;
    const max = [byHostInteraction, byVeth, BigInt(MAX_SLOT_INDEX)].reduce((a, b) => (a < b ? a : b));
    if (max < 1n) {
      throw new Error(
        `network.internal CIDRs ${formatCidr(this.hostInteraction)} / ${formatCidr(this.veth)} leave no room for a slot`,
      );
    }
    this.maxIndex = Number(max);
  }

  /** The CIDRs no sandbox may send to (they hold other sandboxes and the host's link ends). */
  get internalCidrs(): Cidr[] {
    return [this.hostInteraction, this.veth];
  }

  forIndex(index: number): SlotAddresses {
    if (!Number.isInteger(index) || index < 1 || index > this.maxIndex) {
      throw new Error(`slot index ${index} is outside 1..${this.maxIndex}`);
    }
    const n = BigInt(index);
    return {
      hostInteractionIp: formatIPv4(this.hostInteraction.network + n),
      hostLinkIp: formatIPv4(this.veth.network + 2n * n),
      sandboxLinkIp: formatIPv4(this.veth.network + 2n * n + 1n),
    };
  }
}

function requireIPv4Cidr(text: string, key: string): Cidr {
  const cidr = typeof text === 'string' ? parseCidr(text.trim()) : null;
  if (!cidr || cidr.family !== 4) throw new Error(`${key} must be an IPv4 CIDR, got ${JSON.stringify(text)}`);
  return cidr;
}
