// Per-sandbox network slots: warm pool, egress policy, teardown and crash reconcile.

import { mkdir, readFile, realpath, writeFile } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import type { Registry } from 'prom-client';
import { run } from '../util/exec.js';
import { AddressPlan } from './addressing.js';
import { BUILTIN_DENIED_CIDRS } from './builtin-denies.js';
import { deleteFlows, flowOf, forgetAddresses, isRedirected, listFlowsFrom } from './conntrack.js';
import { EgressService, type RedirectTarget } from './egress/index.js';
import type { NodeCa } from './egress/node-ca.js';
import {
  PROTO_TCP,
  domainPatterns,
  hasRules,
  resolverAllowed,
  addressVerdictFor,
  verdictFor,
  type EgressBase,
} from './egress-model.js';
import { parseCidr, parseIPv4, type Cidr } from '@aenv/config';
import { NetworkMetrics } from './metrics.js';
import { SlotNames } from './names.js';
import {
  BASE_CHAINS,
  SHARED_CHAINS,
  SLOT_MAPS,
  type SlotMap,
  dropTableScript,
  sharedTableScript,
  slotPolicyScript,
  slotRemovalScript,
} from './nft-rules.js';
import { NftWriter, type NftRunner } from './nft-writer.js';
import { nftSessionRunner } from './nft-session.js';
import {
  createSlotPlumbing,
  destroySlotPlumbing,
  ensureNetnsDir,
  inventory,
  netnsPath,
  releaseNetnsDir,
  type PlumbingContext,
} from './plumbing.js';
import { DEFAULT_RESOLV_CONF_PATHS, resolveSandboxNameserver } from './resolv.js';
import type { EgressPolicy, NetworkSlot } from './types.js';
import { RefillTarget } from './watermark.js';
import { NetworkPolicyError, refuseEgressProxyIn } from './policy.js';
import type { Logger } from '../util/log.js';
import { phase } from '../util/phases.js';

/** The part of the node's logger this module uses. */
export type NetworkLogger = Pick<Logger, 'debug' | 'info' | 'warn' | 'error'>;

export interface NetworkManagerOptions {
  /** `runtime_path` ($AENV_RUNTIME): netns files live in `<runtimePath>/netns/`. */
  runtimePath: string;
  /** `[network.internal]`. */
  internal: { hostInteractionCidr: string; vethCidr: string };
  /** `[network.egress]`: IPv4 CIDRs no policy can open, in addition to the built-in ones (builtin-denies.ts). */
  egress: { alwaysDeniedCidrs: readonly string[] };
  /** `[network.dns].nameserver`: the sandboxes' resolver; empty or absent: the host's (see resolvConfPaths). */
  nameserver?: string;
  /** `[pool]` watermarks and `[pool.network]` switches (`enabled: false`: no warm slots at all). */
  pool: {
    lowWatermark: number;
    highWatermark: number;
    maintenanceEnabled: boolean;
    startupPrewarm: boolean;
    enabled?: boolean;
  };
  /** `[tools].control_plane_port`: where envd listens inside the sandbox. */
  controlPlanePort: number;
  logger?: NetworkLogger;
  metricsRegistry?: Registry;
  /** Names host objects: netns files `<p>-ns-N`, veths `<p>-vN`, nft table `inet <p>`. Default `aenv`. */
  namePrefix?: string;
  /** Where the sandbox nameserver is looked up, in order. */
  resolvConfPaths?: readonly string[];
  /** Replaces the libnftables helper (`nft -f -` when it cannot be built; benchmarks count invocations through it). */
  nftRunner?: NftRunner;
  /** How often a slot whose teardown failed is tried again (default 10 s). */
  leakRetryMs?: number;
  /**
   * `[network.egress]` domain egress (docs/networking.md): the egress proxy's destination ports and listen
   * ports, the node resolver's port, the upstream resolvers. Absent: policies with domain entries are refused.
   */
  domainEgress?: {
    proxyPorts: readonly number[];
    proxyListenPort: number;
    dnsListenPort: number;
    resolvers: readonly string[];
    /** `network.rules` interception: the node CA and the upstream trust store (absent: rules are refused). */
    intercept?: {
      ca: NodeCa;
      upstreamCa: readonly string[];
      secretValue?: (name: string) => string | undefined;
    };
    /** Bulk passthrough connections copied in the kernel by a splice helper (default true; the benchmark's baseline turns it off). */
    splice?: boolean;
  };
}

export interface ReconcileReport {
  /** Kept slots now attached to this manager (use attach(index) to get one later). */
  adopted: NetworkSlot[];
  /** Kept indexes whose netns mount or veth no longer exists; release() them. */
  missing: number[];
  /** Leftovers removed, by kind. */
  removed: { slots: number[]; chains: number; elements: number };
  /** Leftover slots whose teardown failed (logged; the next reconcile retries). */
  failed: number[];
}

type SlotState = 'creating' | 'ready' | 'in-use' | 'releasing' | 'leaked';

interface SlotEntry {
  state: SlotState;
  slot: NetworkSlot;
  /** The slot has its own nft chain and vmap elements (a policy was applied); without them it is denied all. */
  hasChain: boolean;
  /** A sandbox may have opened connections through the slot (it had a policy, or was adopted running). */
  mayHaveFlows: boolean;
  /** Serialises applyPolicy/release on one slot. */
  tail: Promise<void>;
}

type Lifecycle = 'new' | 'starting' | 'running' | 'stopping' | 'stopped';

const noopLogger: NetworkLogger = { debug() {}, info() {}, warn() {}, error() {} };
const RETRY_FILL_MS = 1000;
const TEARDOWN_CONCURRENCY = 4;
const LEAK_RETRY_MS = 10_000;

/**
 * Fault injection for tests: `AENV_FAULT_TEARDOWN_DELAY_MS` holds every background slot teardown back this long,
 * which makes "the answer came before the teardown" (and a crash in between) deterministic. Unset: no delay.
 */
async function faultTeardownDelay(): Promise<void> {
  const ms = Number(process.env.AENV_FAULT_TEARDOWN_DELAY_MS ?? 0);
  if (Number.isFinite(ms) && ms > 0) await new Promise((r) => setTimeout(r, ms));
  // Else after the current turn: the teardown's process spawns do not hold up the answer being written.
  else await new Promise((r) => setImmediate(r));
}

/**
 * Fault injection for tests: `AENV_FAULT_POLICY_DELAY_MS` holds the first policy installation of every slot back
 * this long, which widens any window in which a sandbox would run before its policy is in place. Unset in
 * production: no delay.
 */
async function faultPolicyDelay(): Promise<void> {
  const ms = Number(process.env.AENV_FAULT_POLICY_DELAY_MS ?? 0);
  if (Number.isFinite(ms) && ms > 0) await new Promise((r) => setTimeout(r, ms));
}

export class NetworkManager {
  private readonly names: SlotNames;
  private readonly plan: AddressPlan;
  private readonly deniedCidrs: Cidr[];
  private readonly log: NetworkLogger;
  private readonly nft: NftWriter;
  /** The libnftables helper the writes go through (absent when the options bring their own runner). */
  private readonly nftSession: { close(): void } | undefined;
  private readonly target: RefillTarget;
  private readonly pool: { high: number; maintenance: boolean; prewarm: boolean };
  private readonly metrics: NetworkMetrics;
  private readonly slots = new Map<number, SlotEntry>();
  private readonly readyQueue: number[] = [];
  private readonly creations = new Set<Promise<unknown>>();
  /** Teardowns started by releaseInBackground; shutdown waits for them. */
  private readonly teardowns = new Set<Promise<void>>();
  private ctx: PlumbingContext;
  private dnsServer: string | null = null;
  private readonly egress: EgressService | null;
  private redirect: RedirectTarget | null = null;
  private lifecycle: Lifecycle = 'new';
  private cursor = 0;
  private filling: Promise<void> | null = null;
  private fillAgain = false;
  private retryTimer: NodeJS.Timeout | null = null;
  private leakRetryTimer: NodeJS.Timeout | null = null;

  constructor(private readonly opts: NetworkManagerOptions) {
    if (!isAbsolute(opts.runtimePath))
      throw new Error(`runtime_path must be absolute, got "${opts.runtimePath}"`);
    const port = opts.controlPlanePort;
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new Error(`tools.control_plane_port must be a port number, got ${port}`);
    }
    this.names = new SlotNames(opts.namePrefix ?? 'aenv');
    this.plan = new AddressPlan(opts.internal.hostInteractionCidr, opts.internal.vethCidr);
    const configured = opts.egress.alwaysDeniedCidrs.map((text) => {
      const cidr = typeof text === 'string' ? parseCidr(text.trim()) : null;
      if (!cidr || cidr.family !== 4) {
        throw new Error(
          `network.egress.always_denied_cidrs entry ${JSON.stringify(text)} is not an IPv4 CIDR`,
        );
      }
      return cidr;
    });
    // The configured list adds to the built-in one; it cannot take anything out of it.
    this.deniedCidrs = [...BUILTIN_DENIED_CIDRS, ...configured];
    const ns = opts.nameserver?.trim() ?? '';
    if (ns !== '' && parseIPv4(ns) === null)
      throw new Error(
        `network.dns.nameserver must be an IPv4 address, got ${JSON.stringify(opts.nameserver)}`,
      );
    this.log = opts.logger ?? noopLogger;
    const enabled = opts.pool.enabled !== false;
    let low = enabled ? opts.pool.lowWatermark : 0;
    const high = enabled ? opts.pool.highWatermark : 0;
    if (low > high) {
      // Config validation allows this while maintenance is off; the reference clamps.
      this.log.warn({ low, high }, 'pool.low_watermark > pool.high_watermark; using high for both');
      low = high;
    }
    this.target = new RefillTarget({ lowWatermark: low, highWatermark: high });
    this.pool = {
      high,
      maintenance: enabled && opts.pool.maintenanceEnabled,
      prewarm: enabled && opts.pool.startupPrewarm,
    };
    if (opts.nftRunner) {
      this.nftSession = undefined;
      this.nft = new NftWriter(opts.nftRunner);
    } else {
      // Beside the uid mapping helper (container-driver.ts builds it into the same dir).
      const session = nftSessionRunner(join(opts.runtimePath, 'native'), this.log);
      this.nftSession = session;
      this.nft = new NftWriter(session.runner);
    }
    this.ctx = {
      netnsDir: join(opts.runtimePath, 'netns'),
      names: this.names,
      hostNetnsPath: `/proc/${process.pid}/ns/net`,
    };
    this.metrics = new NetworkMetrics(opts.metricsRegistry, () => this.stats());
    const d = opts.domainEgress;
    for (const r of d?.resolvers ?? []) {
      if (!isResolverAddress(r))
        throw new Error(
          `network.egress.resolvers entry ${JSON.stringify(r)} is not an IPv4 address or ip:port`,
        );
    }
    this.egress = d
      ? new EgressService({
          ports: d.proxyPorts,
          listenPort: d.proxyListenPort,
          dnsListenPort: d.dnsListenPort,
          resolvers: d.resolvers,
          deniedCidrs: [...this.deniedCidrs, ...this.plan.internalCidrs],
          logger: this.log,
          onVerdict: (kind, verdict) => this.metrics.egressDecisions.inc({ kind, verdict }),
          ...(d.intercept ? { intercept: d.intercept } : {}),
          // Beside the uid mapping helper (container-driver.ts builds it into the same dir).
          ...(d.splice !== false ? { spliceHelperDir: join(opts.runtimePath, 'native') } : {}),
        })
      : null;
  }

  /** Pool and slot counts right now. */
  stats(): {
    ready: number;
    inUse: number;
    leaked: number;
    target: number;
    nftInvocations: number;
    egressConnections: number;
    egressSpliced: number;
  } {
    let inUse = 0;
    let leaked = 0;
    for (const e of this.slots.values()) {
      if (e.state === 'in-use') inUse++;
      else if (e.state === 'leaked') leaked++;
    }
    return {
      ready: this.readyQueue.length,
      inUse,
      leaked,
      target: this.target.value,
      nftInvocations: this.nft.invocations,
      egressConnections: this.egress?.openConnections ?? 0,
      egressSpliced: this.egress?.spliceStats?.running ?? 0,
    };
  }

  /** The nameserver sandboxes get (resolved at init). */
  get sandboxNameserver(): string | null {
    return this.dnsServer;
  }

  /**
   * Prepares the host (ip_forward, netns directory, nft table), removes every leftover of this
   * prefix except the `keep` slots (which are adopted), then prewarms the pool if configured.
   */
  async init(keep: readonly number[] = []): Promise<ReconcileReport> {
    if (this.lifecycle !== 'new') throw new Error('NetworkManager.init() may be called once');
    this.lifecycle = 'starting';
    try {
      await checkHostTools();
      await enableIpForwarding(this.log);
      // Mount points show up resolved in mountinfo, so work with the real path from here on.
      await mkdir(this.ctx.netnsDir, { recursive: true, mode: 0o755 });
      this.ctx = { ...this.ctx, netnsDir: await realpath(this.ctx.netnsDir) };
      await ensureNetnsDir(this.ctx.netnsDir);
      const configured = this.opts.nameserver?.trim() ?? '';
      this.dnsServer =
        configured !== ''
          ? configured
          : await resolveSandboxNameserver(this.opts.resolvConfPaths ?? DEFAULT_RESOLV_CONF_PATHS);
      if (this.dnsServer === null)
        this.log.warn({}, 'no non-loopback IPv4 nameserver on the host; sandboxes get no DNS');
      if (this.egress) this.redirect = await this.egress.start();
      const report = await this.reconcileNow(keep);
      for (const slot of report.adopted) this.cursor = Math.max(this.cursor, slot.index);
      this.lifecycle = 'running';
      if (this.pool.prewarm) await this.fill();
      this.kick();
      this.log.info(
        { dnsServer: this.dnsServer, adopted: report.adopted.length, removed: report.removed.slots.length },
        'network ready',
      );
      return report;
    } catch (e) {
      this.lifecycle = 'stopped';
      await this.egress?.stop();
      throw e;
    }
  }

  /** Open connections through the egress proxy (benchmarks). */
  get egressConnections(): number {
    return this.egress?.openConnections ?? 0;
  }

  /** The egress proxy's splice helpers (benchmarks); null: none (no domain egress, or no helper). */
  get egressSplice(): { running: number; handedOff: number; fellBack: number } | null {
    return this.egress?.spliceStats ?? null;
  }

  /** A ready slot: from the warm pool at once, else created now. */
  async acquire(): Promise<NetworkSlot> {
    this.requireRunning();
    const index = this.readyQueue.shift();
    this.target.onAcquire(this.readyQueue.length);
    let slot: NetworkSlot;
    if (index !== undefined) {
      const entry = this.slots.get(index) as SlotEntry;
      entry.state = 'in-use';
      slot = entry.slot;
      this.metrics.acquisitions.inc({ result: 'hit' });
    } else {
      this.metrics.acquisitions.inc({ result: 'miss' });
      slot = await this.createSlot('in-use');
    }
    this.kick();
    return slot;
  }

  /**
   * Installs the sandbox's egress policy, replacing the previous one; until the first one is in place the slot
   * is denied everything. Replacing a policy also cuts the slot's tracked connections the new one does not
   * allow, so a stricter policy holds for connections opened before it too.
   */
  async applyPolicy(slot: NetworkSlot, policy: EgressPolicy): Promise<void> {
    const entry = this.inUseEntry(slot, 'applyPolicy');
    const resolver = this.dnsServer !== null ? parseIPv4(this.dnsServer) : null;
    const dnsAllowed = resolver !== null && resolverAllowed(policy, resolver);
    if (!this.egress && domainPatterns(policy).length > 0)
      throw new NetworkPolicyError(
        'domain entries in allowOut need domain egress, which this node has not enabled',
      );
    if (hasRules(policy) && !this.egress?.intercepts)
      throw new NetworkPolicyError('network.rules need the egress CA, which this node has not loaded');
    if (policy.egressProxy) this.checkEgressProxy(policy);
    // Built before queueing so a malformed policy fails here and changes nothing.
    const script = slotPolicyScript(this.names, slot.index, policy, {
      dnsAllowed,
      redirect: this.redirect,
      base: { internalCidrs: this.plan.internalCidrs, deniedCidrs: this.deniedCidrs },
    });
    await this.serial(entry, async () => {
      const end = this.metrics.policyApplySeconds.startTimer();
      const replacing = entry.mayHaveFlows;
      try {
        if (!replacing) await faultPolicyDelay();
        await phase('policy-nft', () => this.nft.apply(script));
        entry.hasChain = true;
        entry.mayHaveFlows = true;
        const anyName = resolver !== null ? dnsAllowed : policy.allowInternetAccess !== false;
        const base = this.egressBase();
        const admits = (address: string, port: number) => {
          const daddr = parseIPv4(address);
          return (
            daddr !== null &&
            addressVerdictFor(base, policy, { daddr, protocol: PROTO_TCP, dport: port }) === 'accept'
          );
        };
        const cut = this.egress?.setPolicy(slot.index, this.sources(slot), policy, anyName, admits) ?? 0;
        this.metrics.flowsCut.inc(cut);
        if (cut > 0)
          this.log.info({ index: slot.index, cut }, 'cut proxied connections the new policy denies');
      } catch (e) {
        this.metrics.errors.inc({ op: 'apply_policy' });
        throw e;
      }
      end();
      // A slot that never had a policy was denied everything: it has no connections to cut.
      if (replacing) await this.cutDisallowedFlows(slot, policy);
    });
  }

  /** An egressProxy needs the egress service; its address gets the API's check again (policy.ts). */
  private checkEgressProxy(policy: EgressPolicy): void {
    if (!this.egress)
      throw new NetworkPolicyError('egressProxy needs domain egress, which this node has not enabled');
    refuseEgressProxyIn(policy, [...this.plan.internalCidrs, ...this.deniedCidrs]);
  }

  /** Deletes the conntrack entries of the slot's own connections that `policy` does not allow. */
  private async cutDisallowedFlows(slot: NetworkSlot, policy: EgressPolicy): Promise<void> {
    try {
      const flows = await listFlowsFrom(this.sources(slot));
      const base = this.egressBase();
      // Redirected flows are the proxy's and resolver's to judge (by name; setPolicy cut those it denies).
      const doomed = flows.filter((f) => !isRedirected(f) && verdictFor(base, policy, flowOf(f)) === 'deny');
      await deleteFlows(doomed);
      this.metrics.flowsCut.inc(doomed.length);
      if (doomed.length > 0)
        this.log.info({ index: slot.index, cut: doomed.length }, 'cut connections the new policy denies');
    } catch (e) {
      this.metrics.errors.inc({ op: 'cut_flows' });
      throw new Error(
        `the new egress policy is in place, but the connections it denies could not be cut: ${(e as Error).message}`,
        { cause: e },
      );
    }
  }

  /** The source addresses a sandbox's packets may carry (the anti-spoof rules allow no others). */
  private sources(slot: NetworkSlot): string[] {
    return [slot.sandboxLinkIp, slot.hostInteractionIp];
  }

  private egressBase(): EgressBase {
    return {
      internalCidrs: this.plan.internalCidrs,
      deniedCidrs: this.deniedCidrs,
      resolver: this.dnsServer !== null ? parseIPv4(this.dnsServer) : null,
    };
  }

  /** Tears the slot down (a netns that ran a sandbox is never reused). */
  async release(slot: NetworkSlot): Promise<void> {
    const entry = this.inUseEntry(slot, 'release');
    entry.state = 'releasing';
    await this.serial(entry, async () => {
      try {
        await this.destroySlot(slot.index, entry.hasChain);
        this.slots.delete(slot.index);
      } catch (e) {
        entry.state = 'leaked';
        this.log.error({ err: e, index: slot.index }, 'slot teardown failed; retrying in the background');
        this.scheduleLeakRetry();
        throw e;
      }
    });
    this.kick();
  }

  /**
   * Releases the slot with this index whatever became of it since its owner last used it: in use → torn down;
   * a teardown that failed before (leaked) → tried again now; being released → waited for; gone → nothing.
   * For owners that kept only the index (a paused sandbox whose frozen container still sits in the slot).
   */
  async releaseIndex(index: number): Promise<void> {
    const entry = this.slots.get(index);
    if (!entry) return;
    if (entry.state === 'in-use') return this.release(entry.slot);
    if (entry.state === 'releasing') return entry.tail;
    if (entry.state === 'leaked') return this.retryTeardown(index, entry);
    throw new Error(`network slot ${index} is ${entry.state} in the warm pool, not owned by a sandbox`);
  }

  /**
   * releaseIndex without waiting for the teardown. Until it is clean the slot stays in the manager's table
   * (`releasing`), so its index is never handed to another sandbox; shutdown waits for it, a failed one is retried
   * as a leaked slot, and one cut short by a crash is removed by the next init's sweep (no sandbox keeps it).
   */
  releaseInBackground(index: number, onError: (err: unknown) => void): void {
    const work = faultTeardownDelay()
      .then(() => this.releaseIndex(index))
      .catch(onError);
    this.teardowns.add(work);
    void work.finally(() => this.teardowns.delete(work));
  }

  /** The slot with this index, adopted at init/reconcile or acquired earlier. */
  attach(index: number): NetworkSlot {
    const entry = this.slots.get(index);
    if (!entry || entry.state !== 'in-use') {
      throw new Error(`network slot ${index} is not attached (pass it in init/reconcile keep)`);
    }
    return entry.slot;
  }

  /**
   * Removes every host object of this prefix that belongs neither to `keep` nor to this manager
   * (netns mounts and files, veths, nft chains and vmap elements; routes go with their veth) and
   * adopts the kept ones. Safe to call at any time as a leak sweep.
   */
  async reconcile(keep: readonly number[]): Promise<ReconcileReport> {
    this.requireRunning();
    return this.reconcileNow(keep);
  }

  /**
   * Stops the pool and destroys its ready slots. Slots in use stay (their sandboxes may outlive the
   * process); with `destroyAll` they go too. When no slot is left, the nft table and the netns directory mount
   * go as well: a node stopped with no sandboxes leaves nothing on the host (init makes them again).
   */
  async shutdown(opts: { destroyAll?: boolean } = {}): Promise<void> {
    if (this.lifecycle === 'stopped' || this.lifecycle === 'new') {
      this.lifecycle = 'stopped';
      return;
    }
    await Promise.allSettled([...this.teardowns]);
    this.lifecycle = 'stopping';
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.leakRetryTimer) clearTimeout(this.leakRetryTimer);
    await this.filling;
    await Promise.allSettled([...this.creations]);
    const doomed = [...this.slots.entries()].filter(
      ([, e]) => e.state === 'ready' || (opts.destroyAll === true && e.state !== 'releasing'),
    );
    this.readyQueue.length = 0;
    await forEachLimited(doomed, TEARDOWN_CONCURRENCY, async ([index, entry]) => {
      try {
        await this.destroySlot(index, entry.hasChain);
        this.slots.delete(index);
      } catch (e) {
        entry.state = 'leaked';
        this.log.error({ err: e, index }, 'slot teardown at shutdown failed');
      }
    });
    if (opts.destroyAll || this.slots.size === 0) {
      await this.nft.idle();
      await this.sweep(new Set());
      await this.nft.apply(dropTableScript(this.names));
      await releaseNetnsDir(this.ctx.netnsDir);
    }
    await this.egress?.stop();
    this.nftSession?.close();
    this.lifecycle = 'stopped';
  }

  // ---- internals ----

  private requireRunning(): void {
    if (this.lifecycle !== 'running') throw new Error(`network manager is ${this.lifecycle}, not running`);
  }

  private inUseEntry(slot: NetworkSlot, op: string): SlotEntry {
    this.requireRunning();
    const entry = this.slots.get(slot.index);
    if (!entry || entry.state !== 'in-use' || entry.slot.netnsPath !== slot.netnsPath) {
      throw new Error(`${op}: network slot ${slot.index} is not in use`);
    }
    return entry;
  }

  private serial(entry: SlotEntry, fn: () => Promise<void>): Promise<void> {
    const next = entry.tail.then(fn, fn);
    entry.tail = next.catch(() => undefined);
    return next;
  }

  private slotFor(index: number): NetworkSlot {
    const addrs = this.plan.forIndex(index);
    return {
      index,
      netnsPath: netnsPath(this.ctx, index),
      hostIfName: this.names.veth(index),
      hostInteractionIp: addrs.hostInteractionIp,
      dnsServer: this.dnsServer,
      hostLinkIp: addrs.hostLinkIp,
      sandboxLinkIp: addrs.sandboxLinkIp,
      envdUrl: `http://${addrs.hostInteractionIp}:${this.opts.controlPlanePort}`,
    };
  }

  /**
   * Next free index after the last one handed out (round robin), so a released address is not
   * reused soon: conntrack entries of the previous sandbox may still name it.
   */
  private allocateIndex(): number {
    const max = this.plan.maxIndex;
    for (let step = 1; step <= max; step++) {
      const index = ((this.cursor + step - 1) % max) + 1;
      if (!this.slots.has(index)) {
        this.cursor = index;
        return index;
      }
    }
    throw new Error(`all ${max} network slots are in use`);
  }

  private createSlot(stateAfter: 'ready' | 'in-use'): Promise<NetworkSlot> {
    const index = this.allocateIndex();
    const slot = this.slotFor(index);
    const entry: SlotEntry = {
      state: 'creating',
      slot,
      hasChain: false,
      mayHaveFlows: false,
      tail: Promise.resolve(),
    };
    this.slots.set(index, entry);
    const addrs = this.plan.forIndex(index);
    const end = this.metrics.slotCreateSeconds.startTimer();
    const work = (async () => {
      try {
        try {
          await createSlotPlumbing(this.ctx, index, addrs);
        } catch (first) {
          // A leftover with this name (a crash not yet reconciled) was removed by the rollback: retry once.
          this.log.warn({ err: first, index }, 'slot create failed; retrying once');
          await createSlotPlumbing(this.ctx, index, addrs);
        }
      } catch (e) {
        this.slots.delete(index);
        this.metrics.errors.inc({ op: 'create_slot' });
        throw e;
      }
      end();
      entry.state = stateAfter;
      return slot;
    })();
    this.creations.add(work);
    void work.then(
      () => this.creations.delete(work),
      () => this.creations.delete(work),
    );
    return work;
  }

  private async destroySlot(index: number, hasChain: boolean): Promise<void> {
    const end = this.metrics.slotDestroySeconds.startTimer();
    this.egress?.forget(index);
    try {
      await Promise.all([
        destroySlotPlumbing(this.ctx, index),
        hasChain ? this.nft.apply(slotRemovalScript(this.names, index)) : Promise.resolve(),
        // The sandbox's processes are gone by now: nothing of it can add entries meanwhile.
        this.forgetSlotFlows(index),
      ]);
    } catch (e) {
      this.metrics.errors.inc({ op: 'destroy_slot' });
      throw e;
    }
    end();
  }

  /**
   * Drops the conntrack entries of a torn-down slot's addresses, so a later slot on the same address cannot
   * ride its predecessor's flows. Best effort: round-robin indexes already make quick reuse rare.
   */
  private async forgetSlotFlows(index: number): Promise<void> {
    const a = this.plan.forIndex(index);
    await forgetAddresses([a.sandboxLinkIp, a.hostInteractionIp]).catch((err: unknown) => {
      this.metrics.errors.inc({ op: 'forget_flows' });
      this.log.warn({ err, index }, 'could not drop the conntrack entries of a removed slot');
    });
  }

  /** Fills the pool up to the refill target, one slot at a time. */
  private async fill(): Promise<void> {
    for (let guard = 0; guard <= this.pool.high; guard++) {
      if (this.lifecycle !== 'running' || this.target.deficit(this.readyQueue.length, 0) <= 0) return;
      try {
        const slot = await this.createSlot('ready');
        this.readyQueue.push(slot.index);
      } catch (e) {
        this.log.error({ err: e }, 'warm pool refill failed; retrying later');
        this.scheduleRetry();
        return;
      }
    }
  }

  /** Starts a background refill if maintenance is on and the pool is below target. */
  private kick(): void {
    if (!this.pool.maintenance || this.lifecycle !== 'running') return;
    if (this.filling) {
      this.fillAgain = true;
      return;
    }
    if (this.target.deficit(this.readyQueue.length, 0) <= 0) return;
    this.filling = this.fill().finally(() => {
      this.filling = null;
      if (this.fillAgain) {
        this.fillAgain = false;
        this.kick();
      }
    });
  }

  private async retryTeardown(index: number, entry: SlotEntry): Promise<void> {
    await this.serial(entry, async () => {
      if (this.slots.get(index) !== entry) return;
      await this.destroySlot(index, entry.hasChain);
      this.slots.delete(index);
      this.log.info({ index }, 'leaked network slot removed');
    });
  }

  /** Retries the teardown of leaked slots every `leakRetryMs` until none is left (or the manager stops). */
  private scheduleLeakRetry(): void {
    if (this.leakRetryTimer || this.lifecycle !== 'running') return;
    this.leakRetryTimer = setTimeout(() => {
      this.leakRetryTimer = null;
      const leaked = [...this.slots].filter(([, e]) => e.state === 'leaked');
      void forEachLimited(leaked, TEARDOWN_CONCURRENCY, async ([index, entry]) => {
        await this.retryTeardown(index, entry).catch((err: unknown) => {
          this.log.warn({ err, index }, 'leaked network slot still cannot be removed; retrying later');
          this.scheduleLeakRetry();
        });
      });
    }, this.opts.leakRetryMs ?? LEAK_RETRY_MS);
    this.leakRetryTimer.unref();
  }

  private scheduleRetry(): void {
    if (this.retryTimer || !this.pool.maintenance) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.kick();
    }, RETRY_FILL_MS);
    this.retryTimer.unref();
  }

  private async reconcileNow(keep: readonly number[]): Promise<ReconcileReport> {
    const keepSet = new Set<number>();
    for (const index of keep) {
      if (!Number.isInteger(index) || index < 1 || index > this.plan.maxIndex) {
        throw new Error(`cannot keep network slot ${index}: outside 1..${this.plan.maxIndex}`);
      }
      const state = this.slots.get(index)?.state;
      if (state !== undefined && state !== 'in-use' && state !== 'leaked') {
        throw new Error(`cannot keep network slot ${index}: it is ${state} in the warm pool`);
      }
      keepSet.add(index);
    }
    const result = await this.sweep(keepSet);
    const adopted: NetworkSlot[] = [];
    const missing: number[] = [];
    for (const index of keepSet) {
      const existing = this.slots.get(index);
      if (existing?.state === 'in-use') {
        adopted.push(existing.slot);
        continue;
      }
      if (!result.present.has(index)) {
        missing.push(index);
        continue;
      }
      const slot = this.slotFor(index);
      this.slots.set(index, {
        state: 'in-use',
        slot,
        hasChain: result.chains.has(index),
        mayHaveFlows: true,
        tail: Promise.resolve(),
      });
      adopted.push(slot);
    }
    return { adopted, missing, removed: result.removed, failed: result.failed };
  }

  /** Deletes everything of this prefix not live (kept or owned and not leaked). */
  private sweep(keep: ReadonlySet<number>): Promise<{
    present: Set<number>;
    chains: Set<number>;
    failed: number[];
    removed: ReconcileReport['removed'];
  }> {
    return this.nft.exclusive(async () => {
      const live = (index: number) => {
        if (keep.has(index)) return true;
        const state = this.slots.get(index)?.state;
        return state !== undefined && state !== 'leaked';
      };
      const [inv, table] = await Promise.all([inventory(this.ctx), this.listTable()]);
      const all = new Set([...inv.netnsFiles, ...inv.mounts, ...inv.veths]);
      const doomed = [...all].filter((i) => !live(i)).sort((a, b) => a - b);
      const failed: number[] = [];
      await forEachLimited(doomed, TEARDOWN_CONCURRENCY, async (index) => {
        try {
          await destroySlotPlumbing(this.ctx, index);
          await this.forgetSlotFlows(index);
          if (this.slots.get(index)?.state === 'leaked') this.slots.delete(index);
        } catch (e) {
          failed.push(index);
          this.log.error({ err: e, index }, 'cannot remove leftover network slot');
        }
      });
      for (const [index, entry] of this.slots) {
        if (entry.state === 'leaked' && !all.has(index)) this.slots.delete(index);
      }

      const staleElements = table.elements.filter(({ key }) => {
        const index = this.names.indexOfVeth(key);
        return index === null || !live(index);
      });
      const staleChains = table.regularChains.filter((name) => {
        if (SHARED_CHAINS.includes(name)) return false;
        const index = this.names.indexOfChain(name);
        return index === null || !live(index);
      });
      await this.nft.applyNow(
        sharedTableScript(
          {
            names: this.names,
            internalCidrs: this.plan.internalCidrs,
            deniedCidrs: this.deniedCidrs,
            dnsServer: this.dnsServer,
            redirect: this.redirect,
          },
          { elements: staleElements, chains: staleChains, mismatchedBaseChains: table.mismatchedBaseChains },
        ),
      );
      const chains = new Set<number>();
      for (const name of table.regularChains) {
        const index = this.names.indexOfChain(name);
        if (index !== null && live(index)) chains.add(index);
      }
      const present = new Set([...inv.mounts].filter((i) => inv.veths.has(i)));
      return {
        present,
        chains,
        failed,
        removed: {
          slots: doomed.filter((i) => !failed.includes(i)),
          chains: staleChains.length,
          elements: staleElements.length,
        },
      };
    });
  }

  private async listTable(): Promise<{
    regularChains: string[];
    elements: { map: SlotMap; key: string }[];
    mismatchedBaseChains: string[];
  }> {
    const res = await run('nft', ['-j', 'list', 'table', 'inet', this.names.table], {
      allowFailure: true,
      timeoutMs: 30_000,
    });
    if (res.code !== 0) {
      if (/No such file or directory/.test(res.stderr))
        return { regularChains: [], elements: [], mismatchedBaseChains: [] };
      throw new Error(`nft list table inet ${this.names.table} failed: ${res.stderr.trim()}`);
    }
    const doc = JSON.parse(res.stdout) as { nftables: Record<string, unknown>[] };
    const regularChains: string[] = [];
    const elements: { map: SlotMap; key: string }[] = [];
    const mismatchedBaseChains: string[] = [];
    for (const item of doc.nftables) {
      const chain = item['chain'] as
        { name: string; type?: string; hook?: string; prio?: number } | undefined;
      if (chain) {
        const want = BASE_CHAINS[chain.name];
        if (want) {
          if (chain.type !== want.type || chain.hook !== want.hook || chain.prio !== want.prio) {
            mismatchedBaseChains.push(chain.name);
          }
        } else if (chain.hook === undefined) {
          regularChains.push(chain.name);
        }
      }
      const map = item['map'] as { name: string; elem?: unknown[] } | undefined;
      const slotMap = SLOT_MAPS.find((m) => m === map?.name);
      if (map && slotMap) {
        for (const el of map.elem ?? []) {
          const key = Array.isArray(el) ? el[0] : undefined;
          if (typeof key === 'string') elements.push({ map: slotMap, key });
        }
      }
    }
    return { regularChains, elements, mismatchedBaseChains };
  }
}

function isResolverAddress(text: string): boolean {
  const m = /^([0-9.]+)(?::(\d{1,5}))?$/.exec(text);
  return m !== null && parseIPv4(m[1] as string) !== null && (m[2] === undefined || Number(m[2]) <= 65535);
}

async function checkHostTools(): Promise<void> {
  const tools: [string, string[]][] = [
    ['ip', ['-V']],
    ['nft', ['--version']],
    // Cuts the connections a stricter policy no longer allows (conntrack.ts).
    ['conntrack', ['--version']],
    ['unshare', ['--version']],
    ['umount', ['--version']],
  ];
  await Promise.all(
    tools.map(async ([cmd, args]) => {
      try {
        await run(cmd, args, { timeoutMs: 10_000 });
      } catch (e) {
        throw new Error(`network: host tool "${cmd}" is not usable (${(e as Error).message})`);
      }
    }),
  );
}

async function enableIpForwarding(log: NetworkLogger): Promise<void> {
  const path = '/proc/sys/net/ipv4/ip_forward';
  if ((await readFile(path, 'utf8')).trim() === '1') return;
  await writeFile(path, '1\n');
  log.info({}, 'enabled net.ipv4.ip_forward for sandbox egress');
}

async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<unknown>,
): Promise<void> {
  const errors: unknown[] = [];
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++] as T;
      try {
        await fn(item);
      } catch (e) {
        errors.push(e);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (errors.length > 0) throw errors[0];
}
