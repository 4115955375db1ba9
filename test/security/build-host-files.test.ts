// Attack class "hostile API callers (build API)", docs/security.md: the template build API must not read host
// files, follow a registry anywhere, or unpack without bound. A real `aenv server`, the raw build API, a hostile
// registry on loopback (and a bait server that must never be called), planted symlinks, FIFOs and huge files.
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  gzipBombLayer,
  manyEntriesLayer,
  redirectTo,
  startHostileRegistry,
  type HostileRegistry,
} from '../../packages/node/src/image/testing/hostile-registry.js';
import { buildImage, imageOfLayers, writeLayout } from '../../packages/node/src/image/testing/oci-builder.js';
import { startServer, type ApiAnswer, type TestServer } from '../e2e/harness.js';

const RUN = `r${Date.now().toString(36)}`;
const MIB = 1024 * 1024;
// Never in any answer: the start of this host's /etc/shadow, and a marker planted in a stand-in host file.
const SHADOW_HEAD = readFileSync('/etc/shadow', 'utf8').slice(0, 12);
const MARKER = `host-secret-${RUN}`;

interface StatusBody {
  status: 'waiting' | 'building' | 'ready' | 'error';
  reason?: { message: string; step?: string };
}

describe('the build API reads no host files and trusts no registry (simg1)', () => {
  let server: TestServer;
  let reg: HostileRegistry;
  let bait: HostileRegistry;
  let allowed: string;
  let outside: string;
  let n = 0;
  const bombDiffIds: string[] = [];

  beforeAll(async () => {
    allowed = mkdtempSync(join(tmpdir(), 'simg-allowed-'));
    outside = mkdtempSync(join(tmpdir(), 'simg-outside-'));
    writeFileSync(join(outside, 'secret'), `root:${MARKER}:19000:0:99999:7:::\n`);
    const img = buildImage({ layers: [{ entries: [{ name: 'a', content: 'a' }] }] });
    const layout = (name: string) => {
      writeLayout(join(allowed, name), [{ tag: 'latest', item: img }]);
      return join(allowed, name);
    };
    symlinkSync('/etc', join(allowed, 'etc-link'));
    rmSync(join(layout('shadow-index'), 'index.json'));
    symlinkSync('/etc/shadow', join(allowed, 'shadow-index', 'index.json'));
    rmSync(join(layout('secret-layout'), 'oci-layout'));
    symlinkSync(join(outside, 'secret'), join(allowed, 'secret-layout', 'oci-layout'));
    writeFileSync(join(layout('secret-copy'), 'index.json'), readFileSync(join(outside, 'secret')));
    rmSync(join(layout('fifo'), 'index.json'));
    execFileSync('mkfifo', [join(allowed, 'fifo', 'index.json')]);
    truncateSync(join(layout('huge'), 'index.json'), 2 * 1024 * MIB);
    symlinkSync('/etc/shadow', join(allowed, 'shadow.tar'));
    writeFileSync(join(allowed, 'huge.tar'), '');
    truncateSync(join(allowed, 'huge.tar'), 64 * 1024 * MIB);

    reg = await startHostileRegistry();
    bait = await startHostileRegistry();
    bait.serve('ok/app', 'v1', img);
    reg.override(/^\/v2\/redir\/http\/manifests\//, redirectTo(`${bait.url}/v2/ok/app/manifests/v1`));
    reg.override(/^\/v2\/redir\/file\/manifests\//, redirectTo('file:///etc/shadow'));
    let hop = 0;
    reg.override(/^\/v2\/redir\/loop\/manifests\//, (_req, res) => {
      hop++;
      res.writeHead(302, { location: `/v2/redir/loop/manifests/hop${hop}` }).end();
    });
    reg.override(/^\/v2\/realm\/http\/manifests\//, (_req, res) =>
      res.writeHead(401, { 'www-authenticate': `Bearer realm="${bait.url}/token",service="s"` }).end(),
    );
    reg.override(/^\/v2\/body\/leak\/manifests\//, (_req, res) =>
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(JSON.stringify({ errors: [{ code: 'MANIFEST_UNKNOWN', message: `${MARKER} /srv/registry` }] })),
    );
    const zip = await gzipBombLayer(256 * MIB);
    const many = manyEntriesLayer(3000);
    bombDiffIds.push(zip.diffId, many.diffId);
    reg.serve('bomb/zip', 'v1', imageOfLayers([zip]));
    reg.serve('bomb/entries', 'v1', imageOfLayers([many]));

    server = await startServer({
      name: 'simg1',
      toml: [
        '[image.resolver]',
        `local_image_dirs = ["${allowed}", "/var/cache/aenv/images"]`,
        `insecure_registries = ["${reg.host}"]`,
        '[image.limits]',
        'max_layer_mb = 32',
        'max_layer_entries = 1000',
      ].join('\n'),
    });
  });

  afterAll(async () => {
    if (server) {
      const list = await server.api('GET', '/templates');
      for (const t of (list.body ?? []) as { templateID: string; names: string[] }[])
        if (t.names.some((x) => x.startsWith(RUN))) await server.api('DELETE', `/templates/${t.templateID}`);
      expect(await server.stop()).toBe(0);
    }
    await reg?.stop();
    await bait?.stop();
    for (const d of [allowed, outside]) if (d) rmSync(d, { recursive: true, force: true });
  });

  /** Starts a build from `fromImage`: the refusal when the request is refused, else the finished status. */
  async function build(fromImage: string): Promise<{ refused?: ApiAnswer; done?: StatusBody }> {
    const created = await server.api('POST', '/v3/templates', { name: `${RUN}-${n++}`, cpuCount: 1 });
    expect(created.status).toBe(202);
    const id = created.body.templateID as string;
    const r = await server.api('POST', `/v2/templates/${id}/builds/${id}`, { fromImage });
    if (r.status !== 202) return { refused: r };
    for (let i = 0; i < 600; i++) {
      const s = await server.api('GET', `/templates/${id}/builds/${id}/status`);
      if (s.body.status === 'error' || s.body.status === 'ready') {
        const text = JSON.stringify(s.body);
        expect(text).not.toContain(SHADOW_HEAD);
        expect(text).not.toContain(MARKER);
        return { done: s.body as StatusBody };
      }
      await new Promise((res) => setTimeout(res, 200));
    }
    throw new Error(`the build from ${fromImage} did not finish`);
  }

  async function failsWith(fromImage: string, re: RegExp): Promise<void> {
    const r = await build(fromImage);
    expect(r.done?.status, fromImage).toBe('error');
    expect(r.done!.reason!.message, fromImage).toMatch(re);
  }

  it('refuses oci: and oci-archive: paths outside local_image_dirs at once (400, nothing read)', async () => {
    for (const ref of [
      'oci:/etc',
      'oci-archive:/etc/shadow',
      'oci-archive:/proc/self/environ',
      'oci:/var/lib/aenv-e2e/simg1/secrets',
      `oci:${allowed}/../../etc:latest`,
      `oci:${allowed}x/layout`,
      `oci:${outside}`,
      'oci:/var/cache/aenv/../../../etc/shadow',
    ]) {
      const { refused } = await build(ref);
      expect(refused?.status, ref).toBe(400);
      expect(refused!.body).toEqual({ code: 400, message: expect.stringContaining('local_image_dirs') });
    }
  });

  it('does not follow symlinks planted below an allowed directory, nor echo what they point at', async () => {
    await failsWith(`oci:${allowed}/etc-link`, /etc-link is a symbolic link/);
    await failsWith(`oci:${allowed}/etc-link/ssl:latest`, /etc-link is a symbolic link/);
    await failsWith(`oci:${allowed}/shadow-index:latest`, /index\.json is a symbolic link/);
    await failsWith(`oci:${allowed}/secret-layout:latest`, /oci-layout is a symbolic link/);
    await failsWith(`oci-archive:${allowed}/shadow.tar`, /shadow\.tar is a symbolic link/);
  });

  it('never quotes a local file in an error, blocks on no FIFO, and reads no huge file', async () => {
    await failsWith(`oci:${allowed}/secret-copy:latest`, /index\.json: not valid JSON/);
    await failsWith(`oci:${allowed}/fifo:latest`, /index\.json is not a regular file/);
    await failsWith(`oci:${allowed}/huge:latest`, /index\.json is larger than/);
    await failsWith(`oci-archive:${allowed}/huge.tar`, /the archive is \d+ bytes \(limit/);
  });

  it('follows no plain-HTTP redirect or token realm to a host that is not insecure, and stops redirect loops', async () => {
    await failsWith(`${reg.host}/redir/http:v1`, /refusing a redirect to plain HTTP/);
    await failsWith(`${reg.host}/redir/file:v1`, /unsupported URL scheme/);
    await failsWith(`${reg.host}/realm/http:v1`, /token realm .* is not HTTPS/);
    expect(bait.hits).toEqual([]);
    await failsWith(`${reg.host}/redir/loop:v1`, /more than 5 redirects/);
    expect(reg.hits.filter((h) => h.includes('/redir/loop/')).length).toBeLessThanOrEqual(6);
  });

  it("keeps a registry's error body out of the build's answer", async () => {
    await failsWith(`${reg.host}/body/leak:v1`, /not found$/);
  });

  it('stops a gzip bomb and a layer of too many entries with a clear reason; nothing stays in the layer cache', async () => {
    await failsWith(
      `${reg.host}/bomb/zip:v1`,
      /larger than 32 MiB uncompressed \(image\.limits\.max_layer_mb\)/,
    );
    await failsWith(
      `${reg.host}/bomb/entries:v1`,
      /more than 1000 entries \(image\.limits\.max_layer_entries\)/,
    );
    const cache = join(server.home, 'image-cache');
    expect(readdirSync(join(cache, 'tmp'))).toEqual([]);
    for (const idMap of readdirSync(join(cache, 'layers')))
      for (const d of bombDiffIds) expect(existsSync(join(cache, 'layers', idMap, d.slice(7)))).toBe(false);
  });

  it('still answers, and the base image cache is still allowed', async () => {
    expect((await fetch(`${server.url}/health`)).status).toBe(204);
    const created = await server.api('POST', '/v3/templates', { name: `${RUN}-base`, cpuCount: 1 });
    const id = created.body.templateID as string;
    const r = await server.api('POST', `/v2/templates/${id}/builds/${id}`, {
      fromImage: 'oci:/var/cache/aenv/images/base:latest',
    });
    expect(r.status).toBe(202);
    expect((await server.api('DELETE', `/templates/${id}`)).status).toBe(204);
  });
});
