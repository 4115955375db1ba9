// `[image.resolver]`: completes short names from search_registries and gates every registry by
// allowed_registries. The resolver only decides *where* to look; pulling the candidates in order is the
// ImageService's job.

import { ImageError } from './errors.js';
import { containedPath, normalizeLocalDirs, type ContainedPath } from './local-files.js';
import {
  formatReference,
  isValidRegistryHost,
  parseLocalReference,
  parseRegistryReference,
  qualify,
  stripDockerTransport,
  type ImageReference,
} from './reference.js';

export const DEFAULT_IMAGE = 'ubuntu:24.04';
export const DEFAULT_SEARCH_REGISTRIES: readonly string[] = ['docker.io', 'ghcr.io'];

/** The `[image.resolver]` section, as the config package parses it (snake_case keys → camelCase). */
export interface ResolverConfig {
  /** `default_image`: used when a template build gives no `fromImage`. Blank → "ubuntu:24.04". */
  defaultImage?: string;
  /** `search_registries`: short-name completion order. */
  searchRegistries?: readonly string[];
  /** `allowed_registries`: undefined = every registry is allowed; [] = none is. */
  allowedRegistries?: readonly string[] | undefined;
  /** `convert_standard_oci`: the container driver always unpacks standard OCI layers; false is ignored (warned). */
  convertStandardOci?: boolean;
  /** `try_referrers_overlaybd_prefixes`: parsed for compatibility; the container driver never uses referrers. */
  tryReferrersOverlaybdPrefixes?: readonly string[];
  /**
   * `local_image_dirs`: directories that `oci:` / `oci-archive:` paths must lie under; [] refuses local
   * references. Default: the base-image cache that scripts/build-base-image.sh writes.
   */
  localImageDirs?: readonly string[];
}

export const DEFAULT_LOCAL_IMAGE_DIRS: readonly string[] = ['/var/cache/aenv/images'];

export interface NormalizedResolverConfig {
  defaultImage: string;
  searchRegistries: string[];
  allowedRegistries: string[] | undefined;
  localImageDirs: string[];
}

export interface ResolvedReference {
  reference: ImageReference;
  /** formatReference(reference): the key the cache stores the pull under. */
  canonical: string;
  /** Local references: where the path lies below its allowed directory. */
  local?: ContainedPath;
}

function normalizeRegistryList(list: readonly string[], key: string): string[] {
  const out: string[] = [];
  for (const raw of list) {
    const host = raw.trim().replace(/\/+$/, '').toLowerCase();
    if (host.length === 0) continue;
    if (!isValidRegistryHost(host)) {
      throw new ImageError(
        'InvalidReference',
        `image.resolver.${key}: "${raw}" is not a registry host[:port]`,
      );
    }
    if (!out.includes(host)) out.push(host);
  }
  return out;
}

/** Applies the trimming rules (docs/configuration.md#normalisation) and validates registry names. */
export function normalizeResolverConfig(cfg: ResolverConfig = {}): NormalizedResolverConfig {
  const defaultImage = cfg.defaultImage?.trim() || DEFAULT_IMAGE;
  return {
    defaultImage,
    searchRegistries: normalizeRegistryList(
      cfg.searchRegistries ?? DEFAULT_SEARCH_REGISTRIES,
      'search_registries',
    ),
    allowedRegistries:
      cfg.allowedRegistries === undefined || cfg.allowedRegistries === null
        ? undefined
        : normalizeRegistryList(cfg.allowedRegistries, 'allowed_registries'),
    localImageDirs: normalizeLocalDirs(cfg.localImageDirs ?? DEFAULT_LOCAL_IMAGE_DIRS),
  };
}

/** The image a template build starts from when it names none. */
export function defaultImage(cfg: ResolverConfig | NormalizedResolverConfig): string {
  return cfg.defaultImage?.trim() || DEFAULT_IMAGE;
}

export function isRegistryAllowed(cfg: NormalizedResolverConfig, registry: string): boolean {
  return cfg.allowedRegistries === undefined || cfg.allowedRegistries.includes(registry.toLowerCase());
}

function describeAllowed(cfg: NormalizedResolverConfig): string {
  if (cfg.allowedRegistries === undefined) return 'unset (all allowed)';
  return cfg.allowedRegistries.length === 0 ? '[] (none allowed)' : `[${cfg.allowedRegistries.join(', ')}]`;
}

/**
 * The references to try, in order, for what a user typed. Fully-qualified and local references yield one
 * candidate; short names one per allowed search registry. Throws InvalidReference (4xx) when the reference is
 * malformed or nothing is left to try.
 */
export function resolveReference(cfg: NormalizedResolverConfig, input: string): ResolvedReference[] {
  const local = parseLocalReference(input);
  if (local) {
    // Local paths are an operator feature: only below the configured directories (the build API is reachable
    // by every API caller, docs/security.md).
    if (cfg.localImageDirs.length === 0) {
      throw new ImageError(
        'InvalidReference',
        `image reference "${input}": local ${local.transport}: references are disabled (image.resolver.local_image_dirs = [])`,
      );
    }
    const contained = containedPath(cfg.localImageDirs, local.path);
    if (!contained) {
      throw new ImageError(
        'InvalidReference',
        `image reference "${input}": ${local.path} is not below a directory listed in image.resolver.local_image_dirs`,
      );
    }
    return [{ reference: local, canonical: formatReference(local), local: contained }];
  }
  const parsed = parseRegistryReference(stripDockerTransport(input));
  if (parsed.registry !== undefined) {
    if (!isRegistryAllowed(cfg, parsed.registry)) {
      throw new ImageError(
        'InvalidReference',
        `image reference "${input}": registry ${parsed.registry} is not allowed (allowed_registries = ${describeAllowed(cfg)})`,
      );
    }
    const ref = qualify(parsed, parsed.registry);
    return [{ reference: ref, canonical: formatReference(ref) }];
  }
  const allowed = cfg.searchRegistries.filter((r) => isRegistryAllowed(cfg, r));
  if (allowed.length === 0) {
    const notAllowed = cfg.searchRegistries.filter((r) => !isRegistryAllowed(cfg, r));
    const searched =
      cfg.searchRegistries.length === 0 ? '[] (empty)' : `[${cfg.searchRegistries.join(', ')}]`;
    throw new ImageError(
      'InvalidReference',
      `short image name "${input}" cannot be resolved: search_registries = ${searched}` +
        (notAllowed.length > 0 ? `; not allowed: ${notAllowed.join(', ')}` : '') +
        ` (allowed_registries = ${describeAllowed(cfg)})`,
    );
  }
  return allowed.map((registry) => {
    const ref = qualify(parsed, registry);
    return { reference: ref, canonical: formatReference(ref) };
  });
}

/** Registries of the search list that allowed_registries filtered out (for error messages). */
export function disallowedSearchRegistries(cfg: NormalizedResolverConfig): string[] {
  return cfg.searchRegistries.filter((r) => !isRegistryAllowed(cfg, r));
}
