import type { IncomingMessage } from 'node:http';
import { isSandboxId } from '@aenv/protocol';

/** Where a data-plane request goes. */
export interface DataPlaneRoute {
  sandboxId: string;
  port: number;
  /** Path + query to send upstream. */
  upstreamPath: string;
  via: 'prefix' | 'host' | 'headers' | 'signature';
}

/**
 * A data-plane request that cannot be routed; answered with `status` and a plain-text `message`
 * (docs/networking.md#data-plane-routing).
 */
export class RoutingError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function firstHeader(req: IncomingMessage, ...names: string[]): string | undefined {
  for (const n of names) {
    const v = req.headers[n];
    const s = Array.isArray(v) ? v[0] : v;
    if (s && s.trim() !== '') return s.trim();
  }
  return undefined;
}

/**
 * Normalised `[sandbox_proxy].domains` host routing: `{port}-{sandboxID}.{domain}`; throws RoutingError (400)
 * for a host under a served domain that is not one. `isValidId` says which ids a sandbox may have (the gateway
 * takes any DNS label, as the reference's gateway does).
 */
export function parseProxyHost(
  hostHeader: string | undefined,
  domains: readonly string[],
  isValidId: (id: string) => boolean = isSandboxId,
): { sandboxId: string; port: number } | undefined {
  if (!hostHeader || domains.length === 0) return undefined;
  let host = hostHeader.toLowerCase();
  if (host.startsWith('[')) return undefined;
  const colon = host.lastIndexOf(':');
  if (colon >= 0) host = host.slice(0, colon);
  host = host.replace(/\.$/, '');
  for (const domain of domains) {
    if (host === domain || !host.endsWith(`.${domain}`)) continue;
    const label = host.slice(0, host.length - domain.length - 1);
    if (label.includes('.')) continue;
    const dash = label.indexOf('-');
    const portText = dash < 0 ? label : label.slice(0, dash);
    const id = dash < 0 ? '' : label.slice(dash + 1);
    const port = /^\d+$/.test(portText) ? Number(portText) : NaN;
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new RoutingError(400, 'invalid sandbox data-plane host: port is invalid');
    }
    if (!id) throw new RoutingError(400, 'invalid sandbox data-plane host: sandbox id is empty');
    if (!isValidId(id)) throw new RoutingError(400, 'invalid sandbox data-plane host: sandbox id is invalid');
    return { sandboxId: id, port };
  }
  return undefined;
}

function routeFromHeaders(req: IncomingMessage): { sandboxId: string; port: number } {
  const id = firstHeader(req, 'x-agentenv-sandbox-id', 'e2b-sandbox-id');
  if (!id) throw new RoutingError(400, 'missing sandbox routing header');
  if (!isSandboxId(id.toLowerCase())) throw new RoutingError(400, 'invalid sandbox routing header');
  const portText = firstHeader(req, 'x-agentenv-target-port', 'e2b-sandbox-port');
  if (!portText) throw new RoutingError(400, 'missing target port routing header');
  const port = /^\d+$/.test(portText) ? Number(portText) : NaN;
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new RoutingError(400, 'invalid target port routing header');
  }
  return { sandboxId: id.toLowerCase(), port };
}

function hasRoutingHeader(req: IncomingMessage): boolean {
  return firstHeader(req, 'x-agentenv-sandbox-id', 'e2b-sandbox-id') !== undefined;
}

function splitUrl(url: string): { path: string; query: string } {
  const q = url.indexOf('?');
  return q < 0 ? { path: url, query: '' } : { path: url.slice(0, q), query: url.slice(q) };
}

/** True when a header-less request looks like a signed envd `/files` URL (docs/networking.md#data-plane-routing). */
export function isSignedFilesUrl(url: string): boolean {
  const { path, query } = splitUrl(url);
  return path === '/files' && /[?&]signature=/.test(query);
}

/**
 * Classifies a request as data plane (returns its route) or control plane (returns undefined).
 * Order: host routing, then the `/proxy` prefix, then routing headers (any path: `/health` with a sandbox
 * header is the sandbox's envd health, as E2B's proxy decides), then header-less signed `/files` URLs.
 */
export function classify(
  req: IncomingMessage,
  domains: readonly string[],
): DataPlaneRoute | { signedFiles: true; upstreamPath: string } | undefined {
  const url = req.url ?? '/';
  const host = parseProxyHost(req.headers.host, domains);
  const { path, query } = splitUrl(url);
  if (host) return { ...host, upstreamPath: url, via: 'host' };
  if (path === '/proxy' || path.startsWith('/proxy/')) {
    const rest = path === '/proxy' ? '/' : path.slice('/proxy'.length);
    return { ...routeFromHeaders(req), upstreamPath: rest + query, via: 'prefix' };
  }
  if (hasRoutingHeader(req)) return { ...routeFromHeaders(req), upstreamPath: url, via: 'headers' };
  if (isSignedFilesUrl(url)) return { signedFiles: true, upstreamPath: url };
  return undefined;
}
