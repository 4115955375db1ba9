import { isIPv4, isIPv6 } from 'node:net';
import { isDnsName } from '@aenv/config';

/** A listen address as Go's net.Listen takes it: `host:port`, `[v6]:port`, or `:port` for every interface. */
export interface ListenAddress {
  /** undefined = every interface (IPv6 and IPv4). */
  host: string | undefined;
  port: number;
}

export const LISTEN_ADDRESS_RULE =
  'must be "host:port", "[IPv6]:port" or ":port" (host an IP address or DNS name, port 0-65535)';

/** Parses a listen address; throws with {@link LISTEN_ADDRESS_RULE} when it is not one. */
export function parseListenAddress(value: string): ListenAddress {
  const m = /^(\[[^\]]*\]|[^:[\]]*):(\d{1,5})$/.exec(value.trim());
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new Error(LISTEN_ADDRESS_RULE);
  const host = m[1]!;
  if (host === '') return { host: undefined, port };
  if (host.startsWith('[')) {
    const inner = host.slice(1, -1);
    if (!isIPv6(inner)) throw new Error(LISTEN_ADDRESS_RULE);
    return { host: inner, port };
  }
  if (!isIPv4(host) && !isDnsName(host.toLowerCase())) throw new Error(LISTEN_ADDRESS_RULE);
  return { host, port };
}

/** `host:port` for URLs and logs, the IPv6 host bracketed. */
export function joinHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}
