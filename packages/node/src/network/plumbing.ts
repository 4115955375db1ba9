// Kernel objects of a slot: the bind-mounted netns file and the veth pair with addresses and routes.
// Two processes per create: `unshare --net=<file> ip -batch -` makes the netns, pins it on the file
// and configures its side (the veth's host end is created straight into the host netns);
// `ip -batch -` then configures the host end.

import { open, readdir, readFile, rm, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../util/exec.js';
import type { SlotAddresses } from './addressing.js';
import type { SlotNames } from './names.js';

export interface PlumbingContext {
  netnsDir: string;
  names: SlotNames;
  /** Netns the host ends go to: the server's own. */
  hostNetnsPath: string;
}

export function netnsPath(ctx: PlumbingContext, index: number): string {
  return join(ctx.netnsDir, ctx.names.netnsFile(index));
}

/**
 * Connections to the slot's host-interaction address reach services bound to the sandbox's 127.0.0.1 too
 * (E2B's envd forwards localhost ports; dev servers often listen there): inside the netns, TCP to that
 * address is DNAT'ed to 127.0.0.1, which `route_localnet` allows. Services on 0.0.0.0 are reached the same way.
 */
async function forwardToLoopback(netnsFile: string, hostInteractionIp: string): Promise<void> {
  const script = [
    'table ip aenv_localfwd {',
    '  chain prerouting {',
    '    type nat hook prerouting priority dstnat; policy accept;',
    `    iifname "eth0" ip daddr ${hostInteractionIp} meta l4proto tcp dnat to 127.0.0.1`,
    '  }',
    '}',
  ].join('\n');
  await run(
    'nsenter',
    [
      `--net=${netnsFile}`,
      'sh',
      '-c',
      'echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet && echo 1 > /proc/sys/net/ipv4/conf/eth0/route_localnet && exec nft -f -',
    ],
    { input: script + '\n', timeoutMs: 30_000 },
  );
}

/** Creates the slot; on failure removes whatever it made and rethrows. */
export async function createSlotPlumbing(
  ctx: PlumbingContext,
  index: number,
  addrs: SlotAddresses,
): Promise<void> {
  const file = netnsPath(ctx, index);
  const veth = ctx.names.veth(index);
  try {
    const handle = await open(file, 'wx', 0o444);
    await handle.close();
    const inside = [
      `link add eth0 type veth peer name ${veth} netns ${ctx.hostNetnsPath}`,
      'link set eth0 addrgenmode none',
      `addr add ${addrs.sandboxLinkIp}/31 dev eth0`,
      `addr add ${addrs.hostInteractionIp}/32 dev lo`,
      'link set lo up',
      'link set eth0 up',
      `route add default via ${addrs.hostLinkIp} dev eth0 src ${addrs.sandboxLinkIp}`,
    ];
    await run('unshare', [`--net=${file}`, 'ip', '-batch', '-'], {
      input: inside.join('\n') + '\n',
      timeoutMs: 30_000,
    });
    await forwardToLoopback(file, addrs.hostInteractionIp);
    const outside = [
      `link set ${veth} addrgenmode none`,
      `addr add ${addrs.hostLinkIp}/31 dev ${veth}`,
      `link set ${veth} up`,
      // `replace`: a stale route to the address (a torn-down veth the kernel has not unregistered yet) must not
      // fail the slot; the address is this node's own (its internal CIDRs).
      `route replace ${addrs.hostInteractionIp}/32 via ${addrs.sandboxLinkIp} dev ${veth}`,
    ];
    await run('ip', ['-batch', '-'], { input: outside.join('\n') + '\n', timeoutMs: 30_000 });
  } catch (e) {
    await destroySlotPlumbing(ctx, index).catch(() => undefined);
    throw e;
  }
}

/**
 * Removes the veth pair (synchronously, so the name is free again at once) and the netns mount
 * and file. Idempotent: missing pieces are fine. Throws only if something is still there after.
 */
export async function destroySlotPlumbing(ctx: PlumbingContext, index: number): Promise<void> {
  const file = netnsPath(ctx, index);
  const veth = ctx.names.veth(index);
  const [link, mount] = await Promise.all([
    run('ip', ['link', 'del', veth], { allowFailure: true, timeoutMs: 30_000 }),
    run('umount', [file], { allowFailure: true, timeoutMs: 30_000 }),
  ]);
  // Unmounting the netns may free it, and the kernel then deletes the veth pair itself: `ip link del` racing
  // that answers "Cannot find device" (already gone) or "No such device" (being unregistered). Gone is gone.
  if (link.code !== 0 && !/Cannot find device|No such device/.test(link.stderr)) {
    if ((await listLinkNames()).includes(veth))
      throw new Error(`cannot delete ${veth}: ${link.stderr.trim()}`);
  }
  if (mount.code !== 0 && (await mountPointsUnder(ctx.netnsDir)).includes(file)) {
    throw new Error(`cannot unmount ${file}: ${mount.stderr.trim()}`);
  }
  await rm(file, { force: true });
}

/** What exists on the host under this prefix, by slot index. */
export interface HostInventory {
  netnsFiles: Set<number>;
  mounts: Set<number>;
  veths: Set<number>;
}

export async function inventory(ctx: PlumbingContext): Promise<HostInventory> {
  const [files, mounts, links] = await Promise.all([
    readdir(ctx.netnsDir).catch(() => [] as string[]),
    mountPointsUnder(ctx.netnsDir),
    listLinkNames(),
  ]);
  const collect = (names: Iterable<string>, parse: (n: string) => number | null) => {
    const out = new Set<number>();
    for (const n of names) {
      const idx = parse(n);
      if (idx !== null) out.add(idx);
    }
    return out;
  };
  return {
    netnsFiles: collect(files, (n) => ctx.names.indexOfNetnsFile(n)),
    mounts: collect(
      mounts.filter((m) => m.startsWith(ctx.netnsDir + '/')).map((m) => m.slice(ctx.netnsDir.length + 1)),
      (n) => ctx.names.indexOfNetnsFile(n),
    ),
    veths: collect(links, (n) => ctx.names.indexOfVeth(n)),
  };
}

async function listLinkNames(): Promise<string[]> {
  const { stdout } = await run('ip', ['-j', 'link', 'show'], { timeoutMs: 30_000 });
  const links = JSON.parse(stdout) as { ifname: string }[];
  return links.map((l) => l.ifname);
}

/** Mount points at or below `dir` in this process's mount namespace (mountinfo escapes decoded). */
export async function mountPointsUnder(dir: string): Promise<string[]> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const out: string[] = [];
  for (const line of text.split('\n')) {
    const field = line.split(' ')[4];
    if (!field) continue;
    const point = field.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
    if (point === dir || point.startsWith(dir + '/')) out.push(point);
  }
  return out;
}

/**
 * Creates the netns directory and makes it a shared bind mount of itself, as iproute2 does for
 * /run/netns: unmounting a netns file then also unmounts the copies that mount namespaces created
 * later (with shared or slave propagation) hold, so they cannot pin a dead sandbox's netns.
 */
export async function ensureNetnsDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o755 });
  if (!(await mountPointsUnder(dir)).includes(dir)) {
    await run('mount', ['--bind', dir, dir], { timeoutMs: 30_000 });
  }
  await run('mount', ['--make-shared', dir], { timeoutMs: 30_000 });
}

/** Undoes ensureNetnsDir (for uninstall and tests); the directory must hold no netns mounts. */
export async function releaseNetnsDir(dir: string): Promise<void> {
  // A crash between `mount --bind` calls can stack several mounts; a few rounds undo them all.
  for (let round = 0; round < 8 && (await mountPointsUnder(dir)).includes(dir); round++) {
    await run('umount', [dir], { timeoutMs: 30_000 });
  }
}
