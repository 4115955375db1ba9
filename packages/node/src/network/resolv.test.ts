import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseNameservers, pickSandboxNameserver, resolveSandboxNameserver } from './resolv.js';

describe('sandbox nameserver', () => {
  it('reads nameserver lines, skipping comments', () => {
    const text =
      '# generated\nsearch example\nnameserver 127.0.0.53 # stub\n;nameserver 192.0.2.9\n  nameserver\t192.0.2.53\n';
    expect(parseNameservers(text)).toEqual(['127.0.0.53', '192.0.2.53']);
  });

  it('picks the first non-loopback IPv4', () => {
    expect(
      pickSandboxNameserver(['127.0.0.53', '::1', 'fd00::53', '0.0.0.0', '192.0.2.53', '198.51.100.53']),
    ).toBe('192.0.2.53');
    expect(pickSandboxNameserver(['127.0.0.1', '2001:db8::53'])).toBeNull();
  });

  const dirs: string[] = [];
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it('tries the files in order and skips missing ones and ones without a usable server', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aenv-resolv-'));
    dirs.push(dir);
    await writeFile(join(dir, 'stub.conf'), 'nameserver 127.0.0.53\n');
    await writeFile(join(dir, 'upstream.conf'), 'nameserver 192.0.2.53\n');
    const paths = [join(dir, 'missing.conf'), join(dir, 'stub.conf'), join(dir, 'upstream.conf')];
    expect(await resolveSandboxNameserver(paths)).toBe('192.0.2.53');
    expect(await resolveSandboxNameserver(paths.slice(0, 2))).toBeNull();
  });
});
