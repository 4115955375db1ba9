import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { lookupDockerCredentials } from './credentials.js';
import { VerifyingStream, digestOf } from './digest.js';
import { shiftFileCapability } from './file-caps.js';
import { normalizeGcConfig } from './gc.js';
import { parseWwwAuthenticate } from './registry-client.js';
import { SingleFlight } from './single-flight.js';
import { pipeline } from 'node:stream/promises';
import { Readable, Writable } from 'node:stream';

describe('WWW-Authenticate', () => {
  it('parses Bearer and Basic challenges', () => {
    expect(
      parseWwwAuthenticate(
        'Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull"',
      ),
    ).toEqual({
      scheme: 'bearer',
      params: {
        realm: 'https://auth.example/token',
        service: 'registry.example',
        scope: 'repository:a/b:pull',
      },
    });
    expect(parseWwwAuthenticate('Basic realm="x y"')).toEqual({ scheme: 'basic', params: { realm: 'x y' } });
    expect(parseWwwAuthenticate('Bearer realm=unquoted, error="insufficient_scope"')?.params).toEqual({
      realm: 'unquoted',
      error: 'insufficient_scope',
    });
  });
});

describe('docker config credentials', () => {
  it('matches auths keys by host, URL forms included', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aenv-dockercfg-'));
    try {
      writeFileSync(
        join(dir, 'config.json'),
        JSON.stringify({
          auths: {
            'https://reg.example:5000/v1/': { auth: Buffer.from('u1:p:w').toString('base64') },
            'other.example': { username: 'u2', password: 'p2' },
            'empty.example': {},
          },
        }),
      );
      expect(await lookupDockerCredentials(dir, 'reg.example:5000')).toEqual({
        username: 'u1',
        password: 'p:w',
      });
      expect(await lookupDockerCredentials(dir, 'other.example')).toEqual({ username: 'u2', password: 'p2' });
      expect(await lookupDockerCredentials(dir, 'empty.example')).toBeUndefined();
      expect(await lookupDockerCredentials(dir, 'x.example', ['other.example'])).toEqual({
        username: 'u2',
        password: 'p2',
      });
      expect(await lookupDockerCredentials(join(dir, 'missing'), 'reg.example:5000')).toBeUndefined();
      writeFileSync(join(dir, 'config.json'), '{broken');
      await expect(lookupDockerCredentials(dir, 'reg.example:5000')).rejects.toThrow(/not valid JSON/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('file capabilities', () => {
  const v2 = Buffer.from([0x01, 0, 0, 0x02, 0x00, 0x20, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0]);
  it('turns v2 into v3 with the shifted root id', () => {
    const v3 = shiftFileCapability(v2, (id) => id + 100000)!;
    expect(v3.length).toBe(24);
    expect(v3.readUInt32LE(0)).toBe(0x03000001);
    expect(v3.readUInt32LE(4)).toBe(0x2000);
    expect(v3.readUInt32LE(12)).toBe(1);
    expect(v3.readUInt32LE(20)).toBe(100000);
  });
  it('shifts an existing v3 root id and drops garbage', () => {
    const v3 = shiftFileCapability(v2, (id) => id + 7)!;
    expect(shiftFileCapability(v3, (id) => id + 100000)!.readUInt32LE(20)).toBe(100007);
    expect(shiftFileCapability(Buffer.from([1, 2, 3]), (id) => id)).toBeUndefined();
    expect(shiftFileCapability(Buffer.alloc(20), (id) => id)).toBeUndefined();
  });
});

describe('GC config', () => {
  it('applies defaults and the reference rules', () => {
    expect(normalizeGcConfig()).toEqual({
      enabled: true,
      intervalSecs: 1800,
      minAgeSecs: 600,
      highWatermarkRatio: 0.95,
      lowWatermarkRatio: 0.7,
    });
    expect(normalizeGcConfig({ intervalSecs: 0 }).intervalSecs).toBe(1800);
    expect(() => normalizeGcConfig({ highWatermarkRatio: 0 })).toThrow(/high_watermark_ratio/);
    expect(() => normalizeGcConfig({ lowWatermarkRatio: 1.5 })).toThrow(/low_watermark_ratio/);
    expect(() => normalizeGcConfig({ highWatermarkRatio: 0.5, lowWatermarkRatio: 0.6 })).toThrow(
      /must be <=/,
    );
    expect(() => normalizeGcConfig({ highWatermarkRatio: Number.NaN })).toThrow();
  });
});

describe('VerifyingStream', () => {
  const data = Buffer.from('hello world');
  const run = (input: Buffer, expected: { digest: string; size?: number }) =>
    pipeline(
      Readable.from([input]),
      new VerifyingStream(expected, 'blob'),
      new Writable({ write: (_c, _e, cb) => cb() }),
    );
  it('passes matching data and rejects wrong digest, short and long data', async () => {
    await run(data, { digest: digestOf(data), size: data.length });
    await expect(run(data, { digest: digestOf(Buffer.from('x')), size: data.length })).rejects.toMatchObject({
      reason: 'DigestMismatch',
    });
    await expect(run(data, { digest: digestOf(data), size: data.length + 1 })).rejects.toThrow(
      /size mismatch/,
    );
    await expect(run(data, { digest: digestOf(data), size: data.length - 1 })).rejects.toThrow(
      /more than the expected/,
    );
  });
});

describe('SingleFlight', () => {
  it('shares one run; aborting one caller leaves the others', async () => {
    const sf = new SingleFlight<number>();
    let runs = 0;
    let release!: (v: number) => void;
    const fn = (signal: AbortSignal) => {
      runs++;
      return new Promise<number>((resolve, reject) => {
        release = resolve;
        signal.addEventListener('abort', () => reject(new Error('aborted')));
      });
    };
    const ac = new AbortController();
    const a = sf.run('k', fn, ac.signal);
    const b = sf.run('k', fn);
    expect(runs).toBe(1);
    ac.abort(new Error('caller a gave up'));
    await expect(a).rejects.toThrow('caller a gave up');
    release(42);
    await expect(b).resolves.toBe(42);
    expect(sf.size).toBe(0);
  });
  it('aborts the shared run when every caller gave up', async () => {
    const sf = new SingleFlight<number>();
    let aborted = false;
    const fn = (signal: AbortSignal) =>
      new Promise<number>((_r, reject) =>
        signal.addEventListener('abort', () => ((aborted = true), reject(new Error('x')))),
      );
    const ac1 = new AbortController();
    const ac2 = new AbortController();
    const p1 = sf.run('k', fn, ac1.signal);
    const p2 = sf.run('k', fn, ac2.signal);
    ac1.abort(new Error('1'));
    expect(aborted).toBe(false);
    ac2.abort(new Error('2'));
    expect(aborted).toBe(true);
    await expect(p1).rejects.toThrow('1');
    await expect(p2).rejects.toThrow('2');
  });
});

describe('SyncCoalescer', () => {
  it('runs one sync for callers that arrive while one is running, after it', async () => {
    const { SyncCoalescer } = await import('./sync-coalescer.js');
    const starts: number[] = [];
    const releases: (() => void)[] = [];
    const c = new SyncCoalescer(
      () =>
        new Promise<void>((resolve) => {
          starts.push(starts.length);
          releases.push(resolve);
        }),
    );
    const first = c.sync();
    const second = c.sync();
    const third = c.sync();
    expect(starts).toHaveLength(1);
    releases[0]!();
    await first;
    await Promise.resolve();
    await new Promise((r) => setImmediate(r));
    expect(starts).toHaveLength(2); // second and third share the next sync
    releases[1]!();
    await Promise.all([second, third]);
    expect(starts).toHaveLength(2);
  });
});

describe('FsWriter', () => {
  it('runs operations in order and reports the first failure with its path', async () => {
    const { FsWriter } = await import('./fs-writer.js');
    const { existsSync, readFileSync } = await import('node:fs');
    const dir = mkdtempSync(join(tmpdir(), 'aenv-fsw-'));
    const p = (s: string) => new Uint8Array(Buffer.from(join(dir, s)));
    const w = new FsWriter();
    try {
      await w.push({ t: 'mkdir', p: p('d') });
      const uid = process.getuid!();
      await w.push({
        t: 'file',
        p: p('d/f'),
        d: new Uint8Array(Buffer.from('hi')),
        m: 0o644,
        u: uid,
        g: uid,
        mt: 1,
        chmod: false,
      });
      await w.push({ t: 'link', from: p('d/f'), p: p('d/g') });
      await w.drain();
      expect(readFileSync(join(dir, 'd/g'), 'utf8')).toBe('hi');
      await w.push({ t: 'mkdir', p: p('missing/x') });
      await w.push({ t: 'mkdir', p: p('after') });
      await expect(w.drain()).rejects.toThrow(/mkdir ".*missing\/x": ENOENT/);
      expect(existsSync(join(dir, 'after'))).toBe(false);
      await expect(w.push({ t: 'mkdir', p: p('later') })).rejects.toThrow(/ENOENT/);
    } finally {
      await w.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('registry endpoints', () => {
  it("reaches docker.io at Docker Hub's API by default; a configured endpoint (a mirror) replaces it", async () => {
    const { BUILTIN_REGISTRY_ENDPOINTS, RegistryClient } = await import('./registry-client.js');
    expect(BUILTIN_REGISTRY_ENDPOINTS).toEqual({ 'docker.io': 'https://registry-1.docker.io' });
    const builtin = new RegistryClient({});
    expect(builtin.baseUrl('docker.io')).toBe('https://registry-1.docker.io');
    // insecure_registries does not turn Docker Hub's own API into plain HTTP.
    const insecureHub = new RegistryClient({ insecureRegistries: ['docker.io'] });
    expect(insecureHub.baseUrl('docker.io')).toBe('https://registry-1.docker.io');
    const mirror = new RegistryClient({ endpoints: { 'docker.io': 'https://hub.example.test/' } });
    expect(mirror.baseUrl('docker.io')).toBe('https://hub.example.test');
    const plainMirror = new RegistryClient({ endpoints: { 'docker.io': 'http://127.0.0.1:5000' } });
    expect(() => plainMirror.baseUrl('docker.io')).toThrow(
      /plain HTTP; list docker.io in insecure_registries/,
    );
    const local = new RegistryClient({
      insecureRegistries: ['docker.io', '127.0.0.1:5000'],
      endpoints: { 'docker.io': 'http://127.0.0.1:5000' },
    });
    expect(local.baseUrl('docker.io')).toBe('http://127.0.0.1:5000');
    expect(local.baseUrl('127.0.0.1:5000')).toBe('http://127.0.0.1:5000');
    expect(builtin.baseUrl('ghcr.io')).toBe('https://ghcr.io');
    await Promise.all([builtin, insecureHub, mirror, plainMirror, local].map((c) => c.close()));
  });

  it('finds `docker login` credentials for Docker Hub, and gives them to no mirror', async () => {
    const { RegistryClient } = await import('./registry-client.js');
    const dir = mkdtempSync(join(tmpdir(), 'aenv-dockercfg-'));
    // A mirror that asks for Basic credentials and records what it is sent.
    const seen: (string | undefined)[] = [];
    const mirror = createServer((req, res) => {
      seen.push(req.headers.authorization);
      res.writeHead(401, { 'www-authenticate': 'Basic realm="mirror"' }).end();
    });
    await new Promise<void>((r) => mirror.listen(0, '127.0.0.1', r));
    const port = (mirror.address() as AddressInfo).port;
    try {
      // Where `docker login` (no registry named) keeps Docker Hub's credentials.
      const hub = { auth: Buffer.from('hubuser:hubpass').toString('base64') };
      writeFileSync(
        join(dir, 'config.json'),
        JSON.stringify({ auths: { 'https://index.docker.io/v1/': hub } }),
      );
      type WithCredentials = { credentialsFor(ref: object, ctx: object): Promise<unknown> };
      const ref = { registry: 'docker.io', repository: 'library/ubuntu' };
      const builtin = new RegistryClient({ dockerConfigDir: dir });
      expect(await (builtin as unknown as WithCredentials).credentialsFor(ref, {})).toEqual({
        username: 'hubuser',
        password: 'hubpass',
      });
      const viaMirror = new RegistryClient({
        dockerConfigDir: dir,
        insecureRegistries: ['docker.io'],
        endpoints: { 'docker.io': `http://127.0.0.1:${port}` },
        retry: { retries: 0, baseDelayMs: 1 },
      });
      await expect(viaMirror.getManifest(ref, 'latest')).rejects.toThrow(/401|unauthori[sz]ed|credentials/i);
      expect(seen.length).toBeGreaterThan(0);
      expect(seen.every((h) => h === undefined)).toBe(true);
      await Promise.all([builtin.close(), viaMirror.close()]);
    } finally {
      mirror.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
