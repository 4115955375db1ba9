// A registry an attacker runs, on loopback, for security tests: it serves real images (OCI distribution v2 pull
// endpoints) and can instead answer any path with redirects, token challenges, error bodies or hostile layers.
// Every request is recorded, so a test can prove that something was (not) fetched. Plus builders of hostile
// layers (a gzip bomb, a layer with too many entries). Not used by the server itself.

import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createGzip, gzipSync } from 'node:zlib';
import { MediaType } from '../manifest.js';
import type { Blob, BuiltImage } from './oci-builder.js';
import { buildTar, fileHeader } from './tar-builder.js';

export type Responder = (req: IncomingMessage, res: ServerResponse) => void;

export interface HostileRegistry {
  host: string;
  url: string;
  /** Requests received, as "GET /v2/x/manifests/latest" (query strings dropped). */
  hits: string[];
  /** Serves an image's manifest (by tag and by digest), config and layers under `repo`. */
  serve(repo: string, tag: string, image: BuiltImage): void;
  /** Answers every request whose path matches with `respond` (checked before served images). */
  override(match: RegExp, respond: Responder): void;
  stop(): Promise<void>;
}

export async function startHostileRegistry(): Promise<HostileRegistry> {
  const hits: string[] = [];
  const overrides: { match: RegExp; respond: Responder }[] = [];
  const manifests = new Map<string, Blob>();
  const blobs = new Map<string, Buffer>();
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    hits.push(`${req.method} ${path}`);
    req.resume();
    const o = overrides.find((x) => x.match.test(path));
    if (o) return o.respond(req, res);
    if (path === '/v2/' || path === '/v2') return void res.writeHead(200).end('{}');
    const m = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(path);
    if (m && m[2] === 'manifests') {
      const blob = manifests.get(`${m[1]}@${m[3]}`);
      if (blob) {
        return void res
          .writeHead(200, {
            'content-type': blob.mediaType,
            'docker-content-digest': blob.digest,
            'content-length': blob.data.length,
          })
          .end(req.method === 'HEAD' ? undefined : blob.data);
      }
    }
    if (m && m[2] === 'blobs') {
      const data = blobs.get(`${m[1]}@${m[3]}`);
      if (data) {
        return void res
          .writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': data.length })
          .end(data);
      }
    }
    res
      .writeHead(404, { 'content-type': 'application/json' })
      .end('{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  const host = `127.0.0.1:${port}`;
  return {
    host,
    url: `http://${host}`,
    hits,
    serve(repo, tag, image) {
      manifests.set(`${repo}@${tag}`, image.manifest);
      manifests.set(`${repo}@${image.manifest.digest}`, image.manifest);
      for (const b of [image.config, ...image.layers]) blobs.set(`${repo}@${b.digest}`, b.data);
    },
    override(match, respond) {
      overrides.unshift({ match, respond });
    },
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A redirect answer. */
export function redirectTo(location: string, status = 302): Responder {
  return (_req, res) => void res.writeHead(status, { location }).end();
}

/**
 * A gzip layer whose tar holds one file of `bytes` zero bytes: a few hundred KiB on the wire that unpack to
 * `bytes` (a "zip bomb"). Digest and diff id are the real ones, so only a size limit can stop it.
 */
export async function gzipBombLayer(bytes: number): Promise<Blob & { diffId: string }> {
  const gz = createGzip({ level: 9 });
  const out: Buffer[] = [];
  gz.on('data', (c: Buffer) => out.push(c));
  const done = new Promise<void>((resolve, reject) => {
    gz.on('end', resolve);
    gz.on('error', reject);
  });
  const tarHash = createHash('sha256');
  const write = async (b: Buffer) => {
    tarHash.update(b);
    if (!gz.write(b)) await new Promise<void>((r) => gz.once('drain', r));
  };
  await write(fileHeader('zeros', bytes));
  const zeros = Buffer.alloc(4 * 1024 * 1024);
  for (let left = bytes; left > 0; left -= zeros.length) {
    await write(left >= zeros.length ? zeros : zeros.subarray(0, left));
  }
  await write(Buffer.alloc(((512 - (bytes % 512)) % 512) + 1024));
  gz.end();
  await done;
  const data = Buffer.concat(out);
  return {
    digest: `sha256:${createHash('sha256').update(data).digest('hex')}`,
    data,
    mediaType: MediaType.OciLayerGzip,
    diffId: `sha256:${tarHash.digest('hex')}`,
  };
}

/** A gzip layer of `count` empty files (f0, f1, …). */
export function manyEntriesLayer(count: number): Blob & { diffId: string } {
  const tar = buildTar(Array.from({ length: count }, (_, i) => ({ name: `f${i}`, content: '' })));
  const data = gzipSync(tar);
  const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
  return { digest: sha(data), data, mediaType: MediaType.OciLayerGzip, diffId: sha(tar) };
}
