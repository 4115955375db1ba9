/** An IPv4 network: first address as an unsigned 32-bit number and prefix length. */
export interface Ipv4Cidr {
  readonly base: number;
  readonly prefix: number;
}

/** Parses `a.b.c.d/n`. Returns an error phrase instead of throwing so callers can name the key. */
export function parseIpv4Cidr(text: string): Ipv4Cidr | { error: string } {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(text);
  if (!m) return { error: 'is not an IPv4 CIDR (a.b.c.d/n)' };
  const octets = m.slice(1, 5).map(Number);
  const prefix = Number(m[5]);
  if (
    octets.some((o) => o > 255) ||
    prefix > 32 ||
    m.slice(1, 6).some((p) => p.length > 1 && p.startsWith('0'))
  ) {
    return { error: 'is not an IPv4 CIDR (a.b.c.d/n)' };
  }
  const addr = octets.reduce((acc, o) => acc * 256 + o, 0);
  const size = 2 ** (32 - prefix);
  const base = addr - (addr % size);
  if (base !== addr) {
    return { error: `has host bits set (the network is ${formatIpv4(base)}/${prefix})` };
  }
  return { base, prefix };
}

export function cidrSize(c: Ipv4Cidr): number {
  return 2 ** (32 - c.prefix);
}

export function cidrsOverlap(a: Ipv4Cidr, b: Ipv4Cidr): boolean {
  return a.base < b.base + cidrSize(b) && b.base < a.base + cidrSize(a);
}

export function formatIpv4(n: number): string {
  return [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');
}
