import { describe, expect, it } from 'vitest';
import { httpErrorAnswer } from '@aenv/protocol';
import { ImageError } from './errors.js';
import { defaultImage, normalizeResolverConfig, resolveReference, type ResolverConfig } from './resolver.js';

function resolve(cfg: ResolverConfig, ref: string): string[] {
  return resolveReference(normalizeResolverConfig(cfg), ref).map((r) => r.canonical);
}

function resolveError(cfg: ResolverConfig, ref: string): ImageError {
  try {
    resolve(cfg, ref);
  } catch (e) {
    if (e instanceof ImageError) return e;
    throw e;
  }
  throw new Error('expected an error');
}

describe('resolver', () => {
  it('seed example: search docker.io and ghcr.io, allow only ghcr.io → short names resolve to ghcr.io only', () => {
    const cfg = { searchRegistries: ['docker.io', 'ghcr.io'], allowedRegistries: ['ghcr.io'] };
    expect(resolve(cfg, 'ubuntu:24.04')).toEqual(['ghcr.io/ubuntu:24.04']);
    expect(resolve(cfg, 'org/app')).toEqual(['ghcr.io/org/app:latest']);
    expect(resolve(cfg, 'ghcr.io/x/y:1')).toEqual(['ghcr.io/x/y:1']);
    const e = resolveError(cfg, 'docker.io/library/ubuntu:24.04');
    expect(e.reason).toBe('InvalidReference');
    expect(e.message).toContain('docker.io is not allowed');
  });

  it('defaults: search docker.io then ghcr.io, everything allowed', () => {
    expect(resolve({}, 'ubuntu:24.04')).toEqual(['docker.io/library/ubuntu:24.04', 'ghcr.io/ubuntu:24.04']);
    expect(resolve({}, 'quay.io/a/b')).toEqual(['quay.io/a/b:latest']);
  });

  // search_registries × allowed_registries → short-name candidates (their intersection, in search order).
  const table: { search: string[]; allowed: string[] | undefined; expect: string[] | 'error' }[] = [
    { search: ['docker.io', 'ghcr.io'], allowed: undefined, expect: ['docker.io', 'ghcr.io'] },
    { search: ['docker.io', 'ghcr.io'], allowed: ['docker.io', 'ghcr.io'], expect: ['docker.io', 'ghcr.io'] },
    { search: ['docker.io', 'ghcr.io'], allowed: ['ghcr.io', 'docker.io'], expect: ['docker.io', 'ghcr.io'] },
    { search: ['docker.io', 'ghcr.io'], allowed: ['docker.io'], expect: ['docker.io'] },
    { search: ['docker.io', 'ghcr.io'], allowed: ['quay.io'], expect: 'error' },
    { search: ['docker.io', 'ghcr.io'], allowed: [], expect: 'error' },
    { search: [], allowed: undefined, expect: 'error' },
    { search: ['ghcr.io', 'docker.io'], allowed: undefined, expect: ['ghcr.io', 'docker.io'] },
    { search: ['127.0.0.1:5000', 'docker.io'], allowed: ['127.0.0.1:5000'], expect: ['127.0.0.1:5000'] },
  ];
  it.each(table)('search=$search allowed=$allowed → $expect', ({ search, allowed, expect: want }) => {
    const cfg: ResolverConfig = { searchRegistries: search, allowedRegistries: allowed };
    if (want === 'error') {
      const e = resolveError(cfg, 'ubuntu:24.04');
      expect(e.reason).toBe('InvalidReference');
      expect(httpErrorAnswer(e.kind).status).toBeGreaterThanOrEqual(400);
      expect(httpErrorAnswer(e.kind).status).toBeLessThan(500);
      expect(e.message).toContain(
        `search_registries = ${search.length ? `[${search.join(', ')}]` : '[] (empty)'}`,
      );
      if (allowed !== undefined && search.length > 0)
        expect(e.message).toContain(`not allowed: ${search.join(', ')}`);
      return;
    }
    expect(resolve(cfg, 'ubuntu:24.04').map((c) => c.split('/')[0])).toEqual(want);
  });

  it('gates fully-qualified references too ([] = none, unset = all)', () => {
    expect(resolveError({ allowedRegistries: [] }, 'ghcr.io/x/y').message).toContain(
      'allowed_registries = [] (none allowed)',
    );
    expect(resolve({ allowedRegistries: undefined }, 'ghcr.io/x/y')).toEqual(['ghcr.io/x/y:latest']);
    expect(resolveError({ allowedRegistries: ['ghcr.io'] }, 'quay.io/x').message).toContain(
      'registry quay.io is not allowed',
    );
  });

  it('trims registries, drops trailing slashes, lower-cases and dedupes', () => {
    const n = normalizeResolverConfig({
      searchRegistries: [' GHCR.io/ ', 'ghcr.io', '', 'docker.io//'],
      allowedRegistries: ['ghcr.io/'],
    });
    expect(n.searchRegistries).toEqual(['ghcr.io', 'docker.io']);
    expect(n.allowedRegistries).toEqual(['ghcr.io']);
    expect(() => normalizeResolverConfig({ searchRegistries: ['not a host'] })).toThrow(/search_registries/);
  });

  it('default_image: trimmed, blank → ubuntu:24.04', () => {
    expect(defaultImage({})).toBe('ubuntu:24.04');
    expect(defaultImage({ defaultImage: '   ' })).toBe('ubuntu:24.04');
    expect(defaultImage({ defaultImage: ' python:3.12 ' })).toBe('python:3.12');
    expect(normalizeResolverConfig({ defaultImage: ' base ' }).defaultImage).toBe('base');
  });

  it('local transports bypass registry gating but can be disabled', () => {
    const srv = { localImageDirs: ['/srv'] };
    expect(resolve({ ...srv, allowedRegistries: [] }, 'oci:/srv/base:latest')).toEqual([
      'oci:/srv/base:latest',
    ]);
    expect(resolveError({ localImageDirs: [] }, 'oci:/srv/base').message).toContain('disabled');
  });

  it('local paths must lie below local_image_dirs (default: the base-image cache only)', () => {
    expect(resolve({}, 'oci:/var/cache/aenv/images/base:latest')).toEqual([
      'oci:/var/cache/aenv/images/base:latest',
    ]);
    const [c] = resolveReference(normalizeResolverConfig({}), 'oci:/var/cache/aenv/images/base:latest');
    expect(c!.local).toEqual({ root: '/var/cache/aenv/images', components: ['base'] });
    const cfg = { localImageDirs: ['/srv/images/', '/opt/layouts'] };
    expect(resolve(cfg, 'oci-archive:/opt/layouts/a/b.tar')).toEqual(['oci-archive:/opt/layouts/a/b.tar']);
    for (const outside of [
      'oci:/etc',
      'oci-archive:/etc/shadow',
      'oci:/srv/images/../../etc:latest', // normalised to /etc before the check
      'oci:/srv/imagesX/base',
      'oci:/srv',
      'oci:/var/cache/aenv/images/base',
      'oci-archive:/proc/self/environ',
    ]) {
      const e = resolveError(cfg, outside);
      expect(e.reason, outside).toBe('InvalidReference');
      expect(httpErrorAnswer(e.kind).status).toBe(400);
      expect(e.message).toContain('local_image_dirs');
    }
    expect(() => normalizeResolverConfig({ localImageDirs: ['relative'] })).toThrow(/absolute/);
  });

  it('accepts a docker:// prefix', () => {
    expect(resolve({}, 'docker://ghcr.io/a/b:1')).toEqual(['ghcr.io/a/b:1']);
  });
});
