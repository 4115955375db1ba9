// The configuration's IPv4 CIDR checks, over the one IP/CIDR library (ip.ts, also the node's network/ code):
// an error phrase instead of null, so that validation names the key and says what is wrong.
import { cidrsOverlap, formatIPv4, parseCidr, parseIPv4, type Cidr } from './ip.js';

/** An IPv4 network of the configuration (host bits zero). */
export type Ipv4Cidr = Cidr & { family: 4 };

/** Parses `a.b.c.d/n` with no host bits set. */
export function parseIpv4Cidr(text: string): Ipv4Cidr | { error: string } {
  const slash = text.indexOf('/');
  const cidr = parseCidr(text);
  if (!cidr || cidr.family !== 4 || !/^(0|[1-9][0-9]?)$/.test(text.slice(slash + 1)))
    return { error: 'is not an IPv4 CIDR (a.b.c.d/n)' };
  if (parseIPv4(text.slice(0, slash)) !== cidr.network) {
    return { error: `has host bits set (the network is ${formatIPv4(cidr.network)}/${cidr.prefix})` };
  }
  return cidr as Ipv4Cidr;
}

export { cidrsOverlap };
