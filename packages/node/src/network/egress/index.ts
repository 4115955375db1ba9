// Domain egress: the node's transparent egress proxy and sandbox resolver, and the slots they serve.
// NetworkManager starts it with the slots (manager.ts) and feeds it each slot's policy; nft-rules.ts
// `redirectRules` sends a slot's traffic here (docs/networking.md, "Domain egress").

import type { NetworkLogger } from '../manager.js';
import type { Cidr } from '@aenv/config';
import { domainPatterns } from '../egress-model.js';
import type { EgressPolicy } from '../types.js';
import { SandboxDnsServer } from './dns-server.js';
import { compileRules } from './header-rules.js';
import { Interceptor } from './intercept.js';
import type { NodeCa } from './node-ca.js';
import { EgressProxy } from './proxy.js';
import { SlotRegistry } from './slot-registry.js';
import { connectThroughSocks } from './socks.js';
import { SocksTunnel } from './tunnel.js';
import { UpstreamResolver } from './upstream.js';

export interface EgressServiceOptions {
  /** `[network.egress].proxy_ports`. */
  ports: readonly number[];
  /** `[network.egress].proxy_listen_port` (0: ephemeral); the SOCKS tunnel's listener takes the port after the proxy's. */
  listenPort: number;
  /** `[network.egress].dns_listen_port` (0: ephemeral). */
  dnsListenPort: number;
  /** `[network.egress].resolvers`. */
  resolvers: readonly string[];
  /** Never connected to: built-in denies, always_denied_cidrs, internal CIDRs. */
  deniedCidrs: readonly Cidr[];
  logger: NetworkLogger;
  /** Counts verdicts (metrics.ts `aenv_network_egress_decisions_total`). */
  onVerdict?: (kind: 'connection' | 'dns', verdict: string) => void;
  /** `network.rules` interception (intercept.ts): the node CA and the upstream trust store. Absent: rules are refused. */
  intercept?: {
    ca: NodeCa;
    upstreamCa: readonly string[];
    secretValue?: (name: string) => string | undefined;
  };
  /** Where the splice helper is built (splice.ts); absent: passthrough bytes are copied by Node only. */
  spliceHelperDir?: string;
}

/** Longest wait for a SOCKS5 tunnel of an intercepted request (as tunnel.ts's default). */
const SOCKS_CONNECT_TIMEOUT_MS = 10_000;

/** Where the nat chain sends a slot's traffic: DNS to `dnsPort`, TCP to destination port p to `tcp[p]`. */
export interface RedirectTarget {
  dnsPort: number;
  tcp: ReadonlyMap<number, number>;
  /** Where the TCP a tunneled slot (egressProxy) may send by address goes (tunnel.ts); absent: no tunnel. */
  tunnelPort?: number;
}

export class EgressService {
  private readonly registry = new SlotRegistry();
  private readonly proxy: EgressProxy;
  private readonly dns: SandboxDnsServer;
  private readonly interceptor: Interceptor | undefined;
  private readonly tunnel: SocksTunnel;

  constructor(opts: EgressServiceOptions) {
    const resolver = new UpstreamResolver({ servers: opts.resolvers, deniedCidrs: opts.deniedCidrs });
    this.interceptor =
      opts.intercept &&
      new Interceptor({
        ...opts.intercept,
        logger: opts.logger,
        // Intercepted requests of a slot with an egressProxy leave through it, checked as tunnel.ts's are.
        dialSocks: (proxy, destination) =>
          connectThroughSocks(proxy, destination, { resolver, timeoutMs: SOCKS_CONNECT_TIMEOUT_MS }),
      });
    this.tunnel = new SocksTunnel({
      listenPort: opts.listenPort === 0 ? 0 : opts.listenPort + opts.ports.length,
      registry: this.registry,
      resolver,
      logger: opts.logger,
      onVerdict: (v) => opts.onVerdict?.('connection', v),
    });
    this.proxy = new EgressProxy({
      tunnel: this.tunnel,
      ports: opts.ports,
      listenPort: opts.listenPort,
      registry: this.registry,
      resolver,
      logger: opts.logger,
      onVerdict: (v) => opts.onVerdict?.('connection', v),
      ...(this.interceptor ? { interceptor: this.interceptor } : {}),
      ...(opts.spliceHelperDir ? { splice: { dir: opts.spliceHelperDir } } : {}),
    });
    this.dns = new SandboxDnsServer({
      listenPort: opts.dnsListenPort,
      registry: this.registry,
      resolver,
      logger: opts.logger,
      onVerdict: (v) => opts.onVerdict?.('dns', v),
    });
  }

  async start(): Promise<RedirectTarget> {
    await this.proxy.start();
    try {
      await this.tunnel.start();
      await this.dns.start();
    } catch (e) {
      await Promise.all([this.proxy.stop(), this.tunnel.stop()]);
      throw e;
    }
    return this.target;
  }

  get target(): RedirectTarget {
    return { dnsPort: this.dns.port, tcp: this.proxy.listenPorts, tunnelPort: this.tunnel.port };
  }

  /** Whether `network.rules` can be served (the node CA is loaded). */
  get intercepts(): boolean {
    return this.interceptor !== undefined;
  }

  /**
   * The slot's policy from now on (`anyName`: its CIDR policy allows DNS to any name; `admits`: whether it lets
   * the slot reach an address, for names outside allowOut's domains); cuts its proxied connections the policy no
   * longer allows and returns how many.
   */
  setPolicy(
    index: number,
    sources: readonly string[],
    policy: EgressPolicy,
    anyName: boolean,
    admits?: (address: string, port: number) => boolean,
  ): number {
    const patterns = domainPatterns(policy);
    const rules = compileRules(policy.rules);
    if (patterns.length === 0 && rules === null && !policy.egressProxy) this.registry.delete(index);
    else
      this.registry.set(sources, {
        index,
        patterns,
        anyName,
        rules,
        policy,
        ...(rules && admits ? { admits } : {}),
      });
    return this.proxy.recheck(index) + this.tunnel.recheck(index);
  }

  /** The slot is gone: its proxied connections too. */
  forget(index: number): void {
    this.registry.delete(index);
    this.proxy.recheck(index);
    this.tunnel.recheck(index);
  }

  get openConnections(): number {
    return this.proxy.openConnections + this.tunnel.openConnections;
  }

  /** The proxy's splice helpers (null: splicing is off). */
  get spliceStats(): EgressProxy['spliceStats'] {
    return this.proxy.spliceStats;
  }

  async stop(): Promise<void> {
    await Promise.all([this.proxy.stop(), this.tunnel.stop(), this.dns.stop()]);
    this.interceptor?.close();
  }
}
