// One connection through a sandbox's SOCKS5 upstream (`network.egressProxy`): the `socks` library speaks the
// protocol (RFC 1928 CONNECT, RFC 1929 username/password). The proxy's own address passes the node's checks
// first, like any upstream the node dials for a sandbox (upstream.ts: no internal, always-denied or host
// address), and a name is resolved at dial time and that address used for this connection only.

import { Socket, type NetConnectOpts } from 'node:net';
import { parseIPv4 } from '@aenv/config';
import { SocksClient } from 'socks';
import type { EgressProxyConfig } from '../types.js';
import type { UpstreamResolver } from './upstream.js';

/** Buffered per direction before a pipe waits (as proxy.ts). */
const STREAM_BUFFER_BYTES = 256 * 1024;

export interface SocksDestination {
  /** A DNS name (sent as ATYP=domain: the proxy resolves it) or an IPv4 address (ATYP=IPv4). */
  host: string;
  port: number;
}

export interface SocksConnection {
  /** The TCP connection to the proxy; carries the tunneled stream once `ready` resolves. Destroy to cancel. */
  socket: Socket;
  /** Resolves when the proxy reports the destination connected; rejects with why it is not. */
  ready: Promise<void>;
}

/**
 * Which upstream a connection leaves through: the proxy's address and credentials (another of either in a new
 * policy cuts what the old one carries), or null for none (dialled directly).
 */
export const proxyRoute = (p: EgressProxyConfig | undefined): string | null =>
  p ? JSON.stringify([p.address, p.username ?? '', p.password ?? '']) : null;

/** Where the proxy may be dialled: its IPv4 literal or its name's first address the node may reach. */
async function proxyAddress(proxy: EgressProxyConfig, resolver: UpstreamResolver): Promise<string> {
  if (parseIPv4(proxy.host) !== null) {
    if (resolver.refused(proxy.host))
      throw new Error(`egress proxy ${proxy.address} is in a range sandboxes may not reach`);
    return proxy.host;
  }
  const resolved = await resolver.resolve(proxy.host);
  if (!resolved.ok) throw new Error(`egress proxy ${proxy.address}: ${resolved.reason}`);
  return resolved.address;
}

/** Opens a tunnel to `destination` through `proxy`; `timeoutMs` bounds the whole setup. */
export function connectThroughSocks(
  proxy: EgressProxyConfig,
  destination: SocksDestination,
  opts: { resolver: UpstreamResolver; timeoutMs: number },
): SocksConnection {
  const socket = new Socket({ allowHalfOpen: true });
  const timer = setTimeout(
    () => socket.destroy(new Error(`egress proxy ${proxy.address}: no tunnel within ${opts.timeoutMs} ms`)),
    opts.timeoutMs,
  );
  const ready = (async () => {
    const address = await proxyAddress(proxy, opts.resolver);
    if (socket.destroyed) throw new Error('cancelled');
    // Node 20 passes highWaterMark to the socket's streams; @types/node types it only on createServer.
    const tcp: NetConnectOpts & { highWaterMark: number } = {
      host: address,
      port: proxy.port,
      noDelay: true,
      highWaterMark: STREAM_BUFFER_BYTES,
    };
    await new Promise<void>((resolve, reject) => {
      const fail = (err?: Error) => reject(err ?? new Error('closed'));
      socket.once('error', fail);
      socket.once('close', () => fail());
      socket.once('connect', () => {
        socket.off('error', fail);
        resolve();
      });
      socket.connect(tcp);
    });
    await SocksClient.createConnection({
      proxy: {
        host: address,
        port: proxy.port,
        type: 5,
        ...(proxy.username !== undefined ? { userId: proxy.username } : {}),
        ...(proxy.password !== undefined ? { password: proxy.password } : {}),
      },
      command: 'connect',
      destination,
      timeout: opts.timeoutMs,
      existing_socket: socket,
    });
  })().finally(() => clearTimeout(timer));
  // The caller may stop caring (cut, client gone) before it settles.
  ready.catch(() => socket.destroy());
  return { socket, ready };
}
