// Strict IPv4/IPv6 address and CIDR parsing, canonical formatting and containment.
// Addresses are held as bigint so both families share one code path.

export type IpFamily = 4 | 6;

export interface IpAddress {
  family: IpFamily;
  value: bigint;
}

export interface Cidr {
  family: IpFamily;
  /** Network address: host bits are always zero. */
  network: bigint;
  prefix: number;
}

const BITS: Record<IpFamily, number> = { 4: 32, 6: 128 };

/** Dotted quad with decimal octets 0..255 and no leading zeros (as Rust's and Go's parsers require). */
export function parseIPv4(text: string): bigint | null {
  const parts = text.split('.');
  if (parts.length !== 4) return null;
  let value = 0n;
  for (const part of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(part)) return null;
    const octet = Number(part);
    if (octet > 255) return null;
    value = (value << 8n) | BigInt(octet);
  }
  return value;
}

/** RFC 4291 text form, including `::` and a trailing dotted quad; zone ids are rejected. */
export function parseIPv6(text: string): bigint | null {
  if (text.length === 0 || text.includes('%')) return null;
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const parseGroups = (part: string, allowTrailingV4: boolean): bigint[] | null => {
    if (part === '') return [];
    const raw = part.split(':');
    const groups: bigint[] = [];
    for (let i = 0; i < raw.length; i++) {
      const g = raw[i] as string;
      if (allowTrailingV4 && i === raw.length - 1 && g.includes('.')) {
        const v4 = parseIPv4(g);
        if (v4 === null) return null;
        groups.push(v4 >> 16n, v4 & 0xffffn);
        continue;
      }
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null;
      groups.push(BigInt(`0x${g}`));
    }
    return groups;
  };
  let groups: bigint[];
  if (halves.length === 2) {
    const head = parseGroups(halves[0] as string, false);
    const tail = parseGroups(halves[1] as string, true);
    if (!head || !tail) return null;
    const missing = 8 - head.length - tail.length;
    if (missing < 1) return null;
    groups = [...head, ...new Array<bigint>(missing).fill(0n), ...tail];
  } else {
    const all = parseGroups(text, true);
    if (!all || all.length !== 8) return null;
    groups = all;
  }
  return groups.reduce((acc, g) => (acc << 16n) | g, 0n);
}

export function parseIp(text: string): IpAddress | null {
  const v4 = parseIPv4(text);
  if (v4 !== null) return { family: 4, value: v4 };
  const v6 = parseIPv6(text);
  if (v6 !== null) return { family: 6, value: v6 };
  return null;
}

export function formatIPv4(value: bigint): string {
  return [24n, 16n, 8n, 0n].map((shift) => String((value >> shift) & 0xffn)).join('.');
}

/** RFC 5952 canonical form; IPv4-mapped addresses keep the dotted quad (`::ffff:192.0.2.1`). */
export function formatIPv6(value: bigint): string {
  if (value >> 32n === 0xffffn) return `::ffff:${formatIPv4(value & 0xffffffffn)}`;
  const groups: number[] = [];
  for (let shift = 112n; shift >= 0n; shift -= 16n) groups.push(Number((value >> shift) & 0xffffn));
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (gs: number[]) => gs.map((g) => g.toString(16)).join(':');
  if (bestLen < 2) return hex(groups);
  return `${hex(groups.slice(0, bestStart))}::${hex(groups.slice(bestStart + bestLen))}`;
}

export function formatIp(addr: IpAddress): string {
  return addr.family === 4 ? formatIPv4(addr.value) : formatIPv6(addr.value);
}

function hostMask(family: IpFamily, prefix: number): bigint {
  return (1n << BigInt(BITS[family] - prefix)) - 1n;
}

/**
 * `addr/prefix` with a decimal prefix in range for the family. Host bits are cleared
 * (`10.1.2.3/8` → 10.0.0.0/8). Returns null for anything else, including a bare address.
 */
export function parseCidr(text: string): Cidr | null {
  const slash = text.indexOf('/');
  if (slash < 0) return null;
  const addr = parseIp(text.slice(0, slash));
  const prefixText = text.slice(slash + 1);
  if (!addr || !/^[0-9]{1,3}$/.test(prefixText)) return null;
  const prefix = Number(prefixText);
  if (prefix > BITS[addr.family]) return null;
  return { family: addr.family, prefix, network: addr.value & ~hostMask(addr.family, prefix) };
}

/** A bare address becomes a host route (/32 or /128); a CIDR is parsed as by parseCidr. */
export function parseIpOrCidr(text: string): Cidr | null {
  if (text.includes('/')) return parseCidr(text);
  const addr = parseIp(text);
  return addr ? { family: addr.family, network: addr.value, prefix: BITS[addr.family] } : null;
}

export function formatCidr(cidr: Cidr): string {
  return `${formatIp({ family: cidr.family, value: cidr.network })}/${cidr.prefix}`;
}

export function cidrSize(cidr: Cidr): bigint {
  return 1n << BigInt(BITS[cidr.family] - cidr.prefix);
}

export function cidrContainsAddress(cidr: Cidr, addr: IpAddress): boolean {
  return cidr.family === addr.family && (addr.value & ~hostMask(cidr.family, cidr.prefix)) === cidr.network;
}

/** True when `outer` contains every address of `inner`. */
export function cidrContains(outer: Cidr, inner: Cidr): boolean {
  return (
    outer.family === inner.family &&
    outer.prefix <= inner.prefix &&
    (inner.network & ~hostMask(outer.family, outer.prefix)) === outer.network
  );
}

export function cidrsOverlap(a: Cidr, b: Cidr): boolean {
  return cidrContains(a, b) || cidrContains(b, a);
}

/**
 * Drops CIDRs contained in another one of the list, keeping first-seen order of the rest.
 * Two CIDRs either nest or are disjoint, so the result has no overlapping entries.
 */
export function collapseCidrs(cidrs: readonly Cidr[]): Cidr[] {
  return cidrs.filter(
    (c, i) =>
      !cidrs.some(
        (other, j) =>
          j !== i &&
          cidrContains(other, c) &&
          (other.prefix < c.prefix || (other.prefix === c.prefix && j < i)),
      ),
  );
}
