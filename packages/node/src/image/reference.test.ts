import { describe, expect, it } from 'vitest';
import { ImageError } from './errors.js';
import { formatReference, parseLocalReference, parseRegistryReference, qualify } from './reference.js';

const D = `sha256:${'a'.repeat(64)}`;

function canon(ref: string, registry = 'docker.io'): string {
  const p = parseRegistryReference(ref);
  return formatReference(qualify(p, p.registry ?? registry));
}

describe('registry references', () => {
  it.each([
    ['ubuntu:24.04', 'docker.io/library/ubuntu:24.04'],
    ['ubuntu', 'docker.io/library/ubuntu:latest'],
    ['node:20', 'docker.io/library/node:20'],
    ['e2bdev/base', 'docker.io/e2bdev/base:latest'],
    ['docker.io/library/ubuntu:24.04', 'docker.io/library/ubuntu:24.04'],
    ['ghcr.io/x/y', 'ghcr.io/x/y:latest'],
    ['ghcr.io/x/y:v1.2', 'ghcr.io/x/y:v1.2'],
    ['localhost:5000/x', 'localhost:5000/x:latest'],
    ['localhost/x', 'localhost/x:latest'],
    ['127.0.0.1:5000/x:tag', '127.0.0.1:5000/x:tag'],
    ['[::1]:5000/a/b:c', '[::1]:5000/a/b:c'],
    [`ubuntu@${D}`, `docker.io/library/ubuntu@${D}`],
    [`ghcr.io/x/y:v1@${D}`, `ghcr.io/x/y:v1@${D}`],
    ['Registry.Example.COM/a:b', 'registry.example.com/a:b'],
    ['a/b-c__d/e.f:1_2.3-4', 'docker.io/a/b-c__d/e.f:1_2.3-4'],
  ])('%s → %s', (input, expected) => {
    expect(canon(input)).toBe(expected);
  });

  it('completes short names per registry: library/ only on docker.io', () => {
    expect(canon('ubuntu:24.04', 'ghcr.io')).toBe('ghcr.io/ubuntu:24.04');
    expect(canon('e2bdev/base', 'ghcr.io')).toBe('ghcr.io/e2bdev/base:latest');
  });

  it('keeps tag and digest separately', () => {
    expect(parseRegistryReference(`ghcr.io/x/y:v1@${D}`)).toEqual({
      registry: 'ghcr.io',
      repository: 'x/y',
      tag: 'v1',
      digest: D,
    });
    expect(parseRegistryReference('ubuntu')).toEqual({ repository: 'ubuntu' });
  });

  it.each([
    ['', 'empty'],
    ['   ', 'empty'],
    ['Ubuntu', 'lower-case'],
    ['docker.io/Library/ubuntu', 'lower-case'],
    ['ubuntu:', 'tag'],
    ['ubuntu:-bad', 'tag'],
    [`ubuntu:${'t'.repeat(129)}`, 'tag'],
    ['ubuntu@sha256:abc', 'hex digits'],
    [`ubuntu@md5:${'a'.repeat(32)}`, 'not supported'],
    [`ubuntu@sha256:${'A'.repeat(64)}`, 'hex digits'],
    ['a//b', 'path component'],
    ['a/-b', 'path component'],
    ['ghcr.io/', 'empty'],
    ['bad_host.io:99999/x', 'registry host'],
    ['ubu ntu', 'whitespace'],
    [`x/${'a'.repeat(256)}`, 'longer than'],
  ])('rejects %j (%s)', (input, why) => {
    let err: unknown;
    try {
      parseRegistryReference(input);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ImageError);
    expect((err as ImageError).reason).toBe('InvalidReference');
    expect((err as ImageError).userError).toBe(true);
    expect((err as ImageError).kind).toBe('invalid_argument');
    expect((err as ImageError).message).toContain(why);
  });
});

describe('local transports', () => {
  it('parses oci: with and without a tag', () => {
    expect(parseLocalReference('oci:/srv/images/base')).toEqual({
      transport: 'oci',
      path: '/srv/images/base',
    });
    expect(parseLocalReference('oci:/srv/images/base/:latest')).toEqual({
      transport: 'oci',
      path: '/srv/images/base',
      tag: 'latest',
    });
    expect(parseLocalReference('oci:/a/../b:v1.0')).toEqual({ transport: 'oci', path: '/b', tag: 'v1.0' });
    expect(parseLocalReference('oci-archive:/tmp/x.tar:foo/bar:1')).toEqual({
      transport: 'oci-archive',
      path: '/tmp/x.tar',
      tag: 'foo/bar:1',
    });
    expect(parseLocalReference('ubuntu:24.04')).toBeUndefined();
    expect(formatReference({ transport: 'oci', path: '/x', tag: 't' })).toBe('oci:/x:t');
  });

  it.each(['oci:', 'oci:relative/dir', 'oci:/x:bad tag', 'oci-archive:', 'oci:/x:-bad'])(
    'rejects %j',
    (input) => {
      expect(() => parseLocalReference(input)).toThrow(ImageError);
    },
  );
});
