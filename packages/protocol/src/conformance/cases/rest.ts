// envd's REST edge: /health, /envs, /metrics, /init validation, and /files downloads and uploads with their
// HTTP details (Range, conditional GET, gzip both ways, multipart, the error answers).
import { gunzipSync, gzipSync } from 'node:zlib';
import { beforeAll, describe, expect, it } from 'vitest';
import { ACCESS_TOKEN_HEADER } from '../../envd/headers.js';
import { envdFetch, lacks, q, rawGet, sh } from '../helpers.js';
import { WIRE } from '../profiles.js';
import type { ConformanceTarget, TargetSandbox } from '../target.js';

/** POST /init straight to envd, as the node does after a start. */
export function postInit(sbx: TargetSandbox, body: unknown, token?: string): Promise<Response> {
  return envdFetch(sbx, '/init', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { [ACCESS_TOKEN_HEADER]: token } : {}) },
    body: JSON.stringify(body),
  });
}

export function restCases(target: ConformanceTarget): void {
  describe('REST', () => {
    let sbx: TargetSandbox;
    let work: string;
    beforeAll(async () => {
      sbx = await target.sandbox(WIRE);
      work = sbx.workdir;
    });
    const files = (path: string) => `/files?path=${encodeURIComponent(path)}`;

    it('answers /health, /envs and /metrics', async () => {
      expect((await envdFetch(sbx, '/health')).status).toBe(204);
      const envs = (await (await envdFetch(sbx, '/envs')).json()) as Record<string, string>;
      expect(envs).toMatchObject({ FROM_INIT: '1', E2B_SANDBOX: 'true' });
      const m = (await (await envdFetch(sbx, '/metrics')).json()) as Record<string, number>;
      for (const k of [
        'ts',
        'cpu_count',
        'cpu_used_pct',
        'mem_total',
        'mem_used',
        'mem_cache',
        'mem_total_mib',
        'mem_used_mib',
        'disk_used',
        'disk_total',
      ]) {
        expect(typeof m[k]).toBe('number');
      }
      expect(m.cpu_count).toBeGreaterThanOrEqual(1);
      expect(m.mem_total).toBeGreaterThan(m.mem_used!);
      expect(m.disk_total).toBeGreaterThan(0);
    });

    it.skipIf(lacks(target.features, 'envd-init'))('validates /init bodies', async () => {
      expect((await postInit(sbx, { envVars: { A: 1 } })).status).toBe(400);
      expect((await postInit(sbx, { defaultUser: 5 })).status).toBe(400);
      const res = await envdFetch(sbx, '/init', { method: 'POST', body: '{not json' });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { code: number }).code).toBe(400);
    });

    it('serves downloads with Content-Disposition, Range, 304, gzip and 406', async () => {
      const file = `${work}/download me.txt`;
      await sh(sbx, `printf 0123456789 > ${q(file)} && touch -d 2026-01-01T00:00:00Z ${q(file)}`);
      const url = files(file);

      const plain = await envdFetch(sbx, url, { headers: { 'accept-encoding': 'identity' } });
      expect(plain.status).toBe(200);
      expect(plain.headers.get('content-disposition')).toBe('inline; filename="download me.txt"');
      expect(plain.headers.get('content-type')).toBe('text/plain; charset=utf-8');
      expect(plain.headers.get('vary')).toBe('Accept-Encoding');
      expect(await plain.text()).toBe('0123456789');

      const ranged = await envdFetch(sbx, url, { headers: { range: 'bytes=2-4' } });
      expect(ranged.status).toBe(206);
      expect(ranged.headers.get('content-range')).toBe('bytes 2-4/10');
      expect(await ranged.text()).toBe('234');
      expect((await envdFetch(sbx, url, { headers: { range: 'bytes=50-' } })).status).toBe(416);

      const cached = await envdFetch(sbx, url, {
        headers: { 'if-modified-since': new Date('2026-02-01T00:00:00Z').toUTCString() },
      });
      expect(cached.status).toBe(304);

      const gz = await envdFetch(sbx, url, { headers: { 'accept-encoding': 'gzip' } });
      expect(gz.headers.get('content-encoding')).toBe('gzip');
      expect(await gz.text()).toBe('0123456789'); // undici decompresses

      const none = await envdFetch(sbx, url, { headers: { 'accept-encoding': 'br, identity;q=0' } });
      expect(none.status).toBe(406);

      const missing = await envdFetch(sbx, files(`${work}/nope`));
      expect(missing.status).toBe(404);
      expect(await missing.json()).toEqual({
        code: 404,
        message: `path '${work}/nope' does not exist`,
      });
      const dir = await envdFetch(sbx, files(work));
      expect(dir.status).toBe(400);
    });

    it('accepts raw and gzip octet-stream uploads and rejects bad ones', async () => {
      const target = `${work}/up/raw.bin`;
      const res = await envdFetch(sbx, files(target), {
        method: 'POST',
        headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
        body: gzipSync(Buffer.from('unzipped content')),
      });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual([{ path: target, name: 'raw.bin', type: 'file' }]);
      expect(await sh(sbx, `cat ${q(target)}`)).toBe('unzipped content');
      expect((await sh(sbx, `stat -c %a ${q(`${work}/up`)}`)).trim()).toBe('755');

      // undici's fetch decompresses transparently; read the raw bytes to see the gzip stream itself.
      const raw = await rawGet(sbx, files(target), { 'accept-encoding': 'gzip' });
      expect(raw.headers['content-encoding']).toBe('gzip');
      expect(gunzipSync(raw.body).toString()).toBe('unzipped content');

      const noPath = await envdFetch(sbx, '/files', {
        method: 'POST',
        headers: { 'content-type': 'application/octet-stream' },
        body: 'x',
      });
      expect(noPath.status).toBe(400);
      const badType = await envdFetch(sbx, '/files?path=x', {
        method: 'POST',
        headers: { 'content-type': 'text/plain' },
        body: 'x',
      });
      expect(badType.status).toBe(400);
      const badGzip = await envdFetch(sbx, files(`${work}/bad.gz`), {
        method: 'POST',
        headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
        body: 'definitely not gzip',
      });
      expect(badGzip.status).toBe(400);
      const badMeta = await envdFetch(sbx, files(`${work}/m.txt`), {
        method: 'POST',
        headers: { 'content-type': 'application/octet-stream', 'x-metadata-k': 'x'.repeat(5000) },
        body: 'x',
      });
      expect(badMeta.status).toBe(400);

      const form = new FormData();
      form.append('file', new Blob(['a']), `${work}/dup.txt`);
      form.append('file', new Blob(['b']), `${work}/dup.txt`);
      const dup = await envdFetch(sbx, '/files', { method: 'POST', body: form });
      expect(dup.status).toBe(400);
      expect(((await dup.json()) as { message: string }).message).toContain(
        'cannot upload multiple files to the same path',
      );

      const path = `${work}/dir-target`;
      await sh(sbx, `mkdir ${q(path)}`);
      const onDir = await envdFetch(sbx, files(path), {
        method: 'POST',
        headers: { 'content-type': 'application/octet-stream' },
        body: 'x',
      });
      expect(onDir.status).toBe(400);
    });

    it('multipart: uses each part filename, keeps directories, ignores other fields', async () => {
      const form = new FormData();
      form.append('note', 'ignored');
      form.append('file', new Blob(['one']), `${work}/mp/a/one.txt`);
      form.append('file', new Blob(['two']), `${work}/mp/two.txt`);
      const res = await envdFetch(sbx, '/files', { method: 'POST', body: form });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { path: string }[]).map((e) => e.path)).toEqual([
        `${work}/mp/a/one.txt`,
        `${work}/mp/two.txt`,
      ]);
      expect(await sh(sbx, `cat ${q(`${work}/mp/a/one.txt`)}`)).toBe('one');
    });
  });
}
