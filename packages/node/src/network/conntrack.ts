// Tracked connections of a slot in the host's conntrack table, through the `conntrack` tool (conntrack-tools).
// The filter accepts packets of established flows before it looks at the policy, so a policy change only
// reaches existing connections once their entries are gone: the next packet is then a new flow and judged again.

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../util/exec.js';
import { parseIPv4 } from '@aenv/config';
import { PROTO_TCP, PROTO_UDP, type Flow } from './egress-model.js';

/** One entry, by its original direction (sandbox → destination). */
export interface TrackedFlow {
  /** Protocol name as conntrack prints it (`tcp`, `udp`, `icmp`, ...). */
  protocolName: string;
  protocol: number;
  src: string;
  dst: string;
  /** TCP/UDP ports. */
  sport?: number;
  dport?: number;
  /** Source of the reply direction: not `dst` when the flow was redirected to the egress proxy or resolver. */
  replySrc?: string;
}

/** Parses `conntrack -L` output (one entry a line; the first `key=value`s are the original direction). */
export function parseConntrackList(text: string): TrackedFlow[] {
  const flows: TrackedFlow[] = [];
  for (const line of text.split('\n')) {
    const tokens = line.trim().split(/\s+/);
    const [name, num] = tokens;
    if (!name || !num || !/^[a-z0-9-]+$/.test(name) || !/^\d+$/.test(num)) continue;
    const fields = new Map<string, string>();
    let replySrc: string | undefined;
    for (const token of tokens.slice(2)) {
      const eq = token.indexOf('=');
      if (eq <= 0) continue;
      const key = token.slice(0, eq);
      // The reply direction repeats the keys: keep the original's.
      if (!fields.has(key)) fields.set(key, token.slice(eq + 1));
      else if (key === 'src' && replySrc === undefined) replySrc = token.slice(eq + 1);
    }
    const src = fields.get('src');
    const dst = fields.get('dst');
    if (!src || !dst || parseIPv4(src) === null || parseIPv4(dst) === null) continue;
    const port = (key: string) => {
      const v = fields.get(key);
      return v !== undefined && /^\d+$/.test(v) ? Number(v) : undefined;
    };
    const sport = port('sport');
    const dport = port('dport');
    flows.push({
      protocolName: name,
      protocol: Number(num),
      src,
      dst,
      ...(sport !== undefined ? { sport } : {}),
      ...(dport !== undefined ? { dport } : {}),
      ...(replySrc !== undefined && parseIPv4(replySrc) !== null ? { replySrc } : {}),
    });
  }
  return flows;
}

/**
 * Whether the flow was redirected to the egress proxy or the node resolver (its reply comes from elsewhere than
 * the address dialled): the proxy judges those by name (egress/proxy.ts), the address filter never sees them.
 */
export const isRedirected = (t: TrackedFlow): boolean => t.replySrc !== undefined && t.replySrc !== t.dst;

/** The flow as the egress filter judges it. */
export function flowOf(t: TrackedFlow): Flow {
  const hasPorts = t.protocol === PROTO_TCP || t.protocol === PROTO_UDP;
  return {
    daddr: parseIPv4(t.dst) as bigint,
    protocol: t.protocol,
    dport: hasPorts ? (t.dport ?? null) : null,
  };
}

/**
 * `conntrack -R` lines deleting these entries. TCP/UDP by their full tuple; other protocols by addresses and
 * protocol (the filter judges them by destination alone, so every such entry between the two goes).
 */
export function deleteLines(flows: readonly TrackedFlow[]): string {
  const lines = new Set<string>();
  for (const f of flows) {
    const base = `-D -s ${f.src} -d ${f.dst}`;
    const tuple =
      (f.protocol === PROTO_TCP || f.protocol === PROTO_UDP) &&
      f.sport !== undefined &&
      f.dport !== undefined;
    lines.add(
      tuple
        ? `${base} -p ${f.protocolName} --sport ${f.sport} --dport ${f.dport}`
        : `${base} -p ${f.protocol}`,
    );
  }
  return [...lines].map((l) => `${l}\n`).join('');
}

/** Entries whose original source is one of `addresses` (a sandbox's own addresses). */
export async function listFlowsFrom(addresses: readonly string[]): Promise<TrackedFlow[]> {
  const lists = await Promise.all(
    addresses.map((a) => {
      if (parseIPv4(a) === null) throw new Error(`not an IPv4 address: ${JSON.stringify(a)}`);
      return run('conntrack', ['-L', '-f', 'ipv4', '-s', a], { timeoutMs: 30_000 });
    }),
  );
  return lists.flatMap((r) => parseConntrackList(r.stdout));
}

/** Deletes the entries (one process for all; an entry that has expired meanwhile is skipped). */
export async function deleteFlows(flows: readonly TrackedFlow[]): Promise<void> {
  if (flows.length === 0) return;
  await runCommands(deleteLines(flows));
}

/**
 * `conntrack -R FILE`: conntrack opens the file by name, and `/dev/stdin` cannot be opened when it is the socket
 * Node gives a child as its stdin; so the commands go through a private temporary file.
 */
async function runCommands(lines: string): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'aenv-conntrack-'));
  try {
    const file = join(dir, 'commands');
    await writeFile(file, lines, { mode: 0o600 });
    await run('conntrack', ['-R', file], { timeoutMs: 30_000 });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Deletes every entry from or to `addresses` (a slot being torn down: its address may be handed out again). */
export async function forgetAddresses(addresses: readonly string[]): Promise<void> {
  const lines = addresses.flatMap((a) => {
    if (parseIPv4(a) === null) throw new Error(`not an IPv4 address: ${JSON.stringify(a)}`);
    return [`-D -s ${a}\n`, `-D -d ${a}\n`];
  });
  await runCommands(lines.join(''));
}

/**
 * Where the sandbox's TCP connection from `src`:`sport`, redirected to the egress proxy's tunnel port, was
 * going: the original direction of its conntrack entry (the nat redirect rewrote the destination, and Node
 * offers no SO_ORIGINAL_DST). Null when there is no such redirected entry.
 */
export async function originalDestination(
  src: string,
  sport: number,
): Promise<{ address: string; port: number } | null> {
  if (parseIPv4(src) === null) return null;
  if (!Number.isInteger(sport) || sport < 1 || sport > 65535) return null;
  const r = await run('conntrack', ['-L', '-f', 'ipv4', '-p', 'tcp', '-s', src, '--sport', String(sport)], {
    timeoutMs: 10_000,
  });
  const hits = parseConntrackList(r.stdout).filter(
    (f) => f.protocol === PROTO_TCP && f.src === src && f.sport === sport && isRedirected(f),
  );
  const hit = hits.length === 1 ? hits[0] : undefined;
  return hit?.dport !== undefined ? { address: hit.dst, port: hit.dport } : null;
}
