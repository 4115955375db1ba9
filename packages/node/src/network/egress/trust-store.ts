// What the egress proxy trusts on the upstream hop of an intercepted request: the host's CA bundle (where
// distributions keep it) and, for tests or private CAs, `[network.egress].upstream_ca_file`.

import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';

/** Where distributions keep the system CA bundle (Debian/Ubuntu/Alpine, Fedora/RHEL, openSUSE, others). */
export const HOST_CA_BUNDLES = [
  '/etc/ssl/certs/ca-certificates.crt',
  '/etc/pki/tls/certs/ca-bundle.crt',
  '/etc/ssl/ca-bundle.pem',
  '/etc/ssl/cert.pem',
] as const;

const PEM = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** The certificates (PEM each) the upstream's chain is verified against. */
export function upstreamTrust(extraFile: string, bundles: readonly string[] = HOST_CA_BUNDLES): string[] {
  let host: string[] = [];
  for (const path of bundles) {
    try {
      host = readFileSync(path, 'utf8').match(PEM) ?? [];
    } catch {
      continue;
    }
    if (host.length > 0) break;
  }
  // No system bundle on this host: Node's own copy of the Mozilla list.
  if (host.length === 0) host = [...rootCertificates];
  if (extraFile === '') return host;
  let extra: string[];
  try {
    extra = readFileSync(extraFile, 'utf8').match(PEM) ?? [];
  } catch (e) {
    throw new Error(`network.egress.upstream_ca_file ${extraFile} cannot be read: ${(e as Error).message}`);
  }
  if (extra.length === 0)
    throw new Error(`network.egress.upstream_ca_file ${extraFile} holds no PEM certificate`);
  return [...host, ...extra];
}
