// Which headers cross the proxy (docs/security.md, "Data-plane proxy"): hop-by-hop headers never do, the
// platform's own credentials never reach sandbox code, and routing headers are the proxy's business.
import type { IncomingHttpHeaders } from 'node:http';

/** RFC 9110 §7.6.1 connection-specific fields, plus the non-standard ones clients still send. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
]);

/** Headers the proxy consumes: routing and the traffic token (checked, then dropped). */
export const PROXY_HEADERS = [
  'x-agentenv-sandbox-id',
  'x-agentenv-target-port',
  'e2b-sandbox-id',
  'e2b-sandbox-port',
  'e2b-traffic-access-token',
];

type HeaderBag = Record<string, string | string[] | undefined>;

function nominated(headers: HeaderBag): Set<string> {
  const v = headers.connection;
  const text = Array.isArray(v) ? v.join(',') : (v ?? '');
  return new Set(
    text
      .split(',')
      .map((s) => s.trim().toLowerCase())
      .filter(Boolean),
  );
}

/** `headers` without hop-by-hop fields and those the `Connection` header names. */
export function endToEnd(headers: HeaderBag): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const named = nominated(headers);
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined || HOP_BY_HOP.has(k) || named.has(k)) continue;
    out[k] = v;
  }
  return out;
}

/** Whether any value of the header contains the platform API key (whatever the header's name or count). */
function carriesKey(value: string | string[], apiKey: string): boolean {
  return Array.isArray(value) ? value.some((v) => v.includes(apiKey)) : value.includes(apiKey);
}

export interface UpstreamHeaderOptions {
  platformApiKey: string;
  /** The envd token, when it was validated for this envd request (it is forwarded then, and only then). */
  validatedAccessToken?: string;
  /** `host:port` of the upstream. */
  upstreamHost: string;
  method: string;
  upstreamPath: string;
}

/**
 * The headers sent to the sandbox. Node has already joined repeated fields (and kept only the first of
 * those that may appear once), so every spelling and count of a header is one entry here. Dropped: hop-by-hop
 * fields, `Expect` (the front already answered 100-continue), routing headers, the traffic token, an
 * `X-Access-Token` that was not validated for envd, and every header carrying the platform API key
 * (`X-API-Key`, `Authorization: Bearer …`, a cookie, …).
 */
export function upstreamRequestHeaders(
  headers: IncomingHttpHeaders,
  o: UpstreamHeaderOptions,
): Record<string, string | string[]> {
  const out = endToEnd(headers);
  delete out.expect;
  delete out['content-length'];
  for (const k of PROXY_HEADERS) delete out[k];
  delete out['x-access-token'];
  for (const [k, v] of Object.entries(out)) if (carriesKey(v, o.platformApiKey)) delete out[k];
  if (o.validatedAccessToken !== undefined) out['x-access-token'] = o.validatedAccessToken;
  if (headers.host && !headers.host.includes(o.platformApiKey)) out['x-forwarded-host'] = headers.host;
  out['x-forwarded-proto'] = 'http';
  out['x-forwarded-method'] = o.method;
  out['x-forwarded-uri'] = o.upstreamPath;
  out.host = o.upstreamHost;
  return out;
}

/** The Host a request to `port` carries upstream under a sandbox's `maskRequestHost` (`${PORT}`: the port). */
export const maskedHost = (mask: string, port: number): string => mask.split('${PORT}').join(String(port));

/** The sandbox's response headers as sent to the client. */
export function downstreamResponseHeaders(headers: HeaderBag): Record<string, string | string[]> {
  return endToEnd(headers);
}
