// The ingress side of `SandboxNetworkConfig` (docs/networking.md#data-plane-routing): `httpsPorts`, the sandbox
// ports the proxy reaches over TLS (certificates not verified), and `maskRequestHost`, the Host header the
// sandbox's services see on proxied requests (`${PORT}` becomes the port). Set at create only.
import { ApiError } from './errors.js';

export interface IngressSettings {
  httpsPorts?: number[];
  maskRequestHost?: string;
}

/** More HTTPS ports than any service set needs; each is looked up on every proxied request. */
export const MAX_HTTPS_PORTS = 64;
/** A DNS name (253) with a port, and room for `${PORT}` templates. */
const MAX_MASK_LENGTH = 255;
const PORT_TEMPLATE = '${PORT}';
/** What a Host header may be after `${PORT}` is substituted: a reg-name or IPv4 (RFC 3986), optional port. */
const HOST_VALUE = /^[A-Za-z0-9](?:[A-Za-z0-9._~-]*[A-Za-z0-9])?(?::\d{1,5})?$/;

/** Parses `network.httpsPorts` / `network.maskRequestHost` of a create; throws a 400 naming the field. */
export function parseIngressSettings(network: unknown, envdPort: number): IngressSettings {
  if (typeof network !== 'object' || network === null) return {};
  const { httpsPorts, maskRequestHost } = network as Record<string, unknown>;
  const out: IngressSettings = {};
  if (httpsPorts !== undefined && httpsPorts !== null) {
    if (!Array.isArray(httpsPorts))
      throw new ApiError(400, 'network.httpsPorts must be an array of port numbers');
    if (httpsPorts.length > MAX_HTTPS_PORTS)
      throw new ApiError(
        400,
        `network.httpsPorts has ${httpsPorts.length} entries; at most ${MAX_HTTPS_PORTS} are allowed`,
      );
    const ports: number[] = [];
    httpsPorts.forEach((p: unknown, i) => {
      if (typeof p !== 'number' || !Number.isInteger(p) || p < 1 || p > 65535)
        throw new ApiError(
          400,
          `network.httpsPorts[${i}] must be a port number 1-65535, got ${JSON.stringify(p)}`,
        );
      if (p === envdPort)
        throw new ApiError(400, `network.httpsPorts[${i}]: the envd port (${envdPort}) cannot be listed`);
      if (!ports.includes(p)) ports.push(p);
    });
    if (ports.length > 0) out.httpsPorts = ports;
  }
  if (maskRequestHost !== undefined && maskRequestHost !== null && maskRequestHost !== '') {
    if (typeof maskRequestHost !== 'string')
      throw new ApiError(400, 'network.maskRequestHost must be a string');
    if (maskRequestHost.length > MAX_MASK_LENGTH)
      throw new ApiError(400, `network.maskRequestHost is longer than ${MAX_MASK_LENGTH} characters`);
    if (!HOST_VALUE.test(maskRequestHost.split(PORT_TEMPLATE).join('1')))
      throw new ApiError(
        400,
        `network.maskRequestHost ${JSON.stringify(maskRequestHost)} is not a host name or host:port (with \${PORT} for the port)`,
      );
    out.maskRequestHost = maskRequestHost;
  }
  return out;
}
