import { issue, type ConfigIssue, type ValueSource } from './errors.js';
import { isUuid, NIL_UUID, normalizeProxyDomains } from './net.js';
import type { MutableConfig } from './types.js';

export const DEFAULT_IMAGE = 'ubuntu:24.04';
export const DEFAULT_GC_INTERVAL_SECS = 1800;

/**
 * Value normalisations applied before validating, as the reference does (docs/configuration.md#normalisation):
 * trimming, domain normalisation, gc interval 0 → 1800, pvm → no dirty-page tracking, clamps.
 * Mutates `c`; returns problems and warnings.
 */
export function normalizeConfig(
  c: MutableConfig,
  sourceOf: (key: string) => ValueSource | undefined,
): { issues: ConfigIssue[]; warnings: string[] } {
  const issues: ConfigIssue[] = [];
  const warnings: string[] = [];
  const isDefault = (key: string) => (sourceOf(key)?.kind ?? 'default') === 'default';

  const resolver = c.image.resolver;
  resolver.default_image = resolver.default_image.trim() || DEFAULT_IMAGE;
  for (const name of ['search_registries', 'allowed_registries', 'insecure_registries'] as const) {
    const list = resolver[name];
    if (!list) continue;
    const key = `image.resolver.${name}`;
    const cleaned = list.map((r) => r.trim().replace(/\/+$/, ''));
    if (cleaned.some((r) => r === ''))
      issues.push(issue(key, list, 'entries must not be empty', sourceOf(key)));
    resolver[name] = cleaned;
  }

  try {
    c.sandbox_proxy.domains = normalizeProxyDomains(c.sandbox_proxy.domains);
  } catch (e) {
    const key = 'sandbox_proxy.domains';
    const detail = (e as Error).message.replace(/^sandbox_proxy\.domains /, '');
    issues.push(
      issue(
        key,
        c.sandbox_proxy.domains,
        `${detail} (DNS names: labels of 1-63 [a-z0-9-], no leading or trailing "-")`,
        sourceOf(key),
      ),
    );
  }

  c.network.egress.always_denied_cidrs = c.network.egress.always_denied_cidrs.map((s) => s.trim());

  if (c.image.cache.gc.interval_secs === 0) c.image.cache.gc.interval_secs = DEFAULT_GC_INTERVAL_SECS;

  if (c.virtualization_mode === 'pvm' && c.memory_snapshot.track_dirty_pages) {
    c.memory_snapshot.track_dirty_pages = false;
    if (!isDefault('memory_snapshot.track_dirty_pages')) {
      warnings.push(
        'memory_snapshot.track_dirty_pages = true is ignored with virtualization_mode = "pvm" (forced false)',
      );
    }
  }

  if (c.p2p.peer_discovery_refresh_interval_secs < 1) {
    warnings.push(
      `p2p.peer_discovery_refresh_interval_secs = ${c.p2p.peer_discovery_refresh_interval_secs} is below 1; using 1`,
    );
    c.p2p.peer_discovery_refresh_interval_secs = 1;
  }

  const ident = c.node_identity;
  if (!isUuid(ident.cluster_id)) {
    const src = sourceOf('node_identity.cluster_id');
    const where = src?.kind === 'env' ? ` (from env ${src.name})` : '';
    warnings.push(
      `node_identity.cluster_id = ${JSON.stringify(ident.cluster_id)}${where} is not a UUID; using the nil UUID ${NIL_UUID}`,
    );
    ident.cluster_id = NIL_UUID;
  } else {
    ident.cluster_id = ident.cluster_id.toLowerCase();
  }

  if (c.sandbox.access_token_hash_seed !== undefined) {
    c.sandbox.access_token_hash_seed = c.sandbox.access_token_hash_seed.trim();
  }
  if (c.snapshot.record_signing_secret !== undefined) {
    c.snapshot.record_signing_secret = c.snapshot.record_signing_secret.trim();
  }
  c.image.resolver.local_image_dirs = c.image.resolver.local_image_dirs.map((d) =>
    d.trim() === '/' ? '/' : d.trim().replace(/\/+$/, ''),
  );

  return { issues, warnings };
}
