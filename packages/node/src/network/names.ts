// Host object names of a slot. Everything a slot creates is named from (prefix, index), so leftovers
// after a crash are found by name alone.

/** Longest prefix that keeps `<prefix>-v<index>` within the kernel's 15-character interface names. */
const PREFIX_PATTERN = /^[a-z][a-z0-9]{0,7}$/;

export const MAX_SLOT_INDEX = 32767;

export class SlotNames {
  constructor(readonly prefix: string) {
    if (!PREFIX_PATTERN.test(prefix)) {
      throw new Error(
        `network name prefix "${prefix}" must be 1-8 characters [a-z0-9], starting with a letter`,
      );
    }
  }

  /** nftables table (family inet). */
  get table(): string {
    return this.prefix;
  }

  /** nft wildcard matching every host-side veth of this prefix. */
  get vethWildcard(): string {
    return `${this.prefix}-v*`;
  }

  netnsFile(index: number): string {
    return `${this.prefix}-ns-${index}`;
  }

  veth(index: number): string {
    return `${this.prefix}-v${index}`;
  }

  /** Per-slot nft chain holding the sandbox's own allowOut/denyOut rules. */
  chain(index: number): string {
    return `slot${index}`;
  }

  /** Per-slot nat chain redirecting a slot's DNS and domain-judged TCP to the egress proxy (egress/). */
  redirectChain(index: number): string {
    return `redir${index}`;
  }

  indexOfNetnsFile(name: string): number | null {
    return parseIndex(name, `${this.prefix}-ns-`);
  }

  indexOfVeth(name: string): number | null {
    return parseIndex(name, `${this.prefix}-v`);
  }

  /** The slot of a per-slot chain (filter `slotN` or nat `redirN`). */
  indexOfChain(name: string): number | null {
    return parseIndex(name, 'slot') ?? parseIndex(name, 'redir');
  }
}

function parseIndex(name: string, head: string): number | null {
  if (!name.startsWith(head)) return null;
  const digits = name.slice(head.length);
  if (!/^[1-9][0-9]{0,4}$/.test(digits)) return null;
  const index = Number(digits);
  return index <= MAX_SLOT_INDEX ? index : null;
}
