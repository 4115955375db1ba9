// Where an allowed name is reached: the addresses the node's resolvers give for it, less every address a
// sandbox may never reach (built-in denies, always_denied_cidrs, internal CIDRs, the host's own addresses), so
// a name an attacker controls cannot be pointed into the host or the cluster (DNS rebinding).

import { Resolver } from 'node:dns/promises';
import { networkInterfaces } from 'node:os';
import { cidrContainsAddress, parseIPv4, type Cidr } from '@aenv/config';

export interface UpstreamResolverOptions {
  /** `[network.egress].resolvers` (`ip` or `ip:port`); empty: the host's resolv.conf. */
  servers: readonly string[];
  /** Built-in denies, always_denied_cidrs and the internal CIDRs. */
  deniedCidrs: readonly Cidr[];
  timeoutMs?: number;
  /** Clock for the answer cache (tests). */
  now?: () => number;
}

export type Resolution = { ok: true; address: string; ttl: number } | { ok: false; reason: string };

/** Names whose answers are kept (oldest dropped first). */
const CACHE_ENTRIES = 10_000;
/** Longest an answer is kept, whatever its TTL says. */
const CACHE_MAX_SECS = 300;

export class UpstreamResolver {
  private readonly resolver: Resolver;
  /** name → answers until `expires` (ms): the sandbox's own query fills it for the proxy's lookup just after. */
  private readonly cache = new Map<
    string,
    { answers: { address: string; ttl: number }[]; expires: number }
  >();
  private readonly now: () => number;

  constructor(private readonly opts: UpstreamResolverOptions) {
    this.now = opts.now ?? Date.now;
    this.resolver = new Resolver({ timeout: opts.timeoutMs ?? 3000, tries: 2 });
    if (opts.servers.length > 0) this.resolver.setServers([...opts.servers]);
  }

  /** IPv4 addresses for `name` with their TTLs (the sandbox's DNS answers come from here too). */
  async lookup(name: string): Promise<{ address: string; ttl: number }[]> {
    const now = this.now();
    const hit = this.cache.get(name);
    if (hit && hit.expires > now) {
      const left = Math.ceil((hit.expires - now) / 1000);
      return hit.answers.map((a) => ({ address: a.address, ttl: Math.min(a.ttl, left) }));
    }
    let answers: { address: string; ttl: number }[];
    try {
      answers = await this.resolver.resolve4(name, { ttl: true });
    } catch {
      return [];
    }
    const ttl = Math.min(CACHE_MAX_SECS, ...answers.map((a) => a.ttl));
    this.cache.delete(name);
    if (answers.length > 0 && ttl > 0) {
      if (this.cache.size >= CACHE_ENTRIES) this.cache.delete(this.cache.keys().next().value as string);
      this.cache.set(name, { answers, expires: now + ttl * 1000 });
    }
    return answers;
  }

  /** The first address of `name` a sandbox may be connected to. */
  async resolve(name: string): Promise<Resolution> {
    const answers = await this.lookup(name);
    if (answers.length === 0) return { ok: false, reason: `${name} does not resolve` };
    const own = hostAddresses();
    for (const a of answers) if (!this.refused(a.address, own)) return { ok: true, ...a };
    return { ok: false, reason: `${name} resolves only to addresses sandboxes may not reach` };
  }

  /** Whether `address` is one a sandbox may never be connected to. */
  refused(address: string, own: ReadonlySet<string> = hostAddresses()): boolean {
    const v = parseIPv4(address);
    if (v === null || own.has(address)) return true;
    return this.opts.deniedCidrs.some((c) => cidrContainsAddress(c, { family: 4, value: v }));
  }
}

/** Every IPv4 address of the host's interfaces, read now (interfaces come and go). */
function hostAddresses(): Set<string> {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4') out.add(a.address);
  }
  return out;
}
