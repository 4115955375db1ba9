// Where a webhook may point (docs/security.md#webhooks): the node makes these requests itself, from the host, so a
// URL is a request a remote caller asks the node to make. Checked when a webhook is written and again on the
// addresses a name resolves to at each delivery (a name that later resolves elsewhere gets no exemption).
import { BlockList, isIP } from 'node:net';
import { networkInterfaces } from 'node:os';

export const MAX_URL_LENGTH = 2048;

export interface TargetPolicy {
  allowLoopback: boolean;
  /** The node's API port: never a target on a loopback or own address (a delivery to itself). */
  apiPort: number;
  /** The node's internal sandbox CIDRs (network.internal): never a target. */
  internalCidrs: readonly string[];
}

/** Addresses no webhook may reach: unspecified, link-local (cloud metadata), multicast, reserved. */
function alwaysBlocked(): BlockList {
  const b = new BlockList();
  b.addSubnet('0.0.0.0', 8, 'ipv4');
  b.addSubnet('169.254.0.0', 16, 'ipv4');
  b.addSubnet('224.0.0.0', 4, 'ipv4');
  b.addSubnet('240.0.0.0', 4, 'ipv4');
  b.addAddress('::', 'ipv6');
  b.addSubnet('fe80::', 10, 'ipv6');
  b.addSubnet('ff00::', 8, 'ipv6');
  return b;
}

const BLOCKED = alwaysBlocked();
const LOOPBACK = (() => {
  const b = new BlockList();
  b.addSubnet('127.0.0.0', 8, 'ipv4');
  b.addAddress('::1', 'ipv6');
  return b;
})();

/** `::ffff:a.b.c.d` is a.b.c.d. */
function unmapped(address: string): { address: string; family: 'ipv4' | 'ipv6' } {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (m) return { address: m[1]!, family: 'ipv4' };
  return { address, family: isIP(address) === 6 ? 'ipv6' : 'ipv4' };
}

function ownAddresses(): Set<string> {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? []) out.add(unmapped(a.address).address);
  return out;
}

/** Why `address` (an IP) on `port` may not be a webhook target, or undefined when it may. */
export function refusedAddress(address: string, port: number, p: TargetPolicy): string | undefined {
  const a = unmapped(address);
  if (BLOCKED.check(a.address, a.family))
    return `${address} is an unspecified, link-local, multicast or reserved address`;
  const internal = new BlockList();
  for (const cidr of p.internalCidrs) {
    const [net, bits] = cidr.split('/');
    if (net && bits) internal.addSubnet(net, Number(bits), isIP(net) === 6 ? 'ipv6' : 'ipv4');
  }
  if (internal.check(a.address, a.family)) return `${address} is in the node's internal sandbox networks`;
  const loopback = LOOPBACK.check(a.address, a.family);
  if (loopback && !p.allowLoopback)
    return `${address} is a loopback address (allowed only with [events.webhooks].allow_loopback)`;
  if (port === p.apiPort && (loopback || ownAddresses().has(a.address)))
    return `${address}:${port} is this node's own API`;
  return undefined;
}

function defaultPort(u: URL): number {
  return u.port ? Number(u.port) : u.protocol === 'https:' ? 443 : 80;
}

/** The URL's host without IPv6 brackets. */
export function urlHost(u: URL): string {
  return u.hostname.replace(/^\[|\]$/g, '');
}

/** Checks a webhook URL as written; returns the reason it is refused, or undefined. */
export function refusedUrl(raw: string, p: TargetPolicy): string | undefined {
  if (raw.length > MAX_URL_LENGTH) return `must be at most ${MAX_URL_LENGTH} characters`;
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return 'must be an absolute http:// or https:// URL';
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return 'must be an http:// or https:// URL';
  if (u.username || u.password) return 'must not carry credentials (use signatureSecret to authenticate)';
  const host = urlHost(u);
  if (!host) return 'must name a host';
  const port = defaultPort(u);
  if (isIP(host)) return refusedAddress(host, port, p);
  const name = host.toLowerCase().replace(/\.$/, '');
  if (name === 'localhost' || name.endsWith('.localhost')) return refusedAddress('127.0.0.1', port, p);
  return undefined;
}

export { defaultPort };
