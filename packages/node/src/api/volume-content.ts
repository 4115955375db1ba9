// `/volumecontent/{volumeID}/{dir,path,file}`: the e2b SDK's `Volume` file methods (list, makeDir, getInfo,
// updateMetadata, readFile, writeFile, remove) without a sandbox. The SDK sends the volume's token as
// `Authorization: Bearer` (no API key), so these are served before the control plane's API-key check, like
// template upload links; an API key is taken too. Bodies stream to and from the volume (docs/volumes.md).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { DomainError, ErrorKind, httpErrorAnswer, isSandboxId, publicMessage } from '@aenv/protocol';
import type { DataPlane } from '@aenv/proxy';
import type { Logger } from '../util/log.js';
import { currentRequestId } from '../util/request-context.js';
import { VolumeFiles, type Ownership } from '../volume/content.js';
import type { VolumeService } from '../volume/service.js';
import { hasValidApiKey, headerValues } from './auth.js';
import { internalErrorMessage } from './errors.js';

const PATH_RE = /^\/volumecontent\/([^/?#]+)\/(dir|path|file)$/;

function answer(res: ServerResponse, status: number, body?: unknown, close = false): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const text = body === undefined ? '' : JSON.stringify(body);
  const requestId = currentRequestId();
  res.writeHead(status, {
    ...(requestId ? { 'x-request-id': requestId } : {}),
    'content-length': String(Buffer.byteLength(text)),
    ...(text ? { 'content-type': 'application/json' } : {}),
    ...(close ? { connection: 'close' } : {}),
  });
  res.end(text);
}

const invalid = (m: string) => new DomainError(ErrorKind.InvalidArgument, m);

/** An optional unsigned integer query parameter (`uid`, `gid`, `mode`, `depth`). */
function intParam(q: URLSearchParams, name: string): number | undefined {
  const v = q.get(name);
  if (v === null || v === '') return undefined;
  if (!/^\d{1,10}$/.test(v)) throw invalid(`${name} must be a non-negative integer`);
  return Number(v);
}

function boolParam(q: URLSearchParams, name: string): boolean {
  const v = q.get(name);
  if (v === null || v === '' || v === 'false') return false;
  if (v === 'true') return true;
  throw invalid(`${name} must be true or false`);
}

function ownership(q: URLSearchParams): Ownership {
  const own: Ownership = {};
  const uid = intParam(q, 'uid');
  const gid = intParam(q, 'gid');
  const mode = intParam(q, 'mode');
  if (uid !== undefined) own.uid = uid;
  if (gid !== undefined) own.gid = gid;
  if (mode !== undefined) own.mode = mode;
  return own;
}

async function jsonBody(req: IncomingMessage, limit = 4096): Promise<Record<string, unknown>> {
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > limit) throw invalid(`the body is larger than ${limit} bytes`);
    chunks.push(c as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8').trim();
  if (!text) return {};
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw invalid('the body is not valid JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw invalid('the body must be a JSON object');
  return v as Record<string, unknown>;
}

function optionalInt(body: Record<string, unknown>, name: string): number | undefined {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw invalid(`${name} must be an integer`);
  return v;
}

export class VolumeContentEndpoint implements DataPlane {
  constructor(
    private readonly volumes: VolumeService,
    private readonly apiKey: string,
    private readonly logger: Logger,
    private readonly next?: DataPlane,
  ) {}

  claims(req: IncomingMessage): boolean {
    if (this.next?.claims(req)) return true;
    return (req.url ?? '').startsWith('/volumecontent/');
  }

  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.next?.claims(req)) return this.next.upgrade(req, socket, head);
    const body = JSON.stringify({ code: 400, message: 'the volume content API takes no WebSocket upgrades' });
    socket.end(
      'HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    if (this.next?.claims(req)) return this.next.handle(req, res);
    this.serve(req, res).catch((err: unknown) => {
      // The rest of an unread body is drained, not parsed as a request, so the connection stays usable and a
      // client still sending (a write refused for the quota) reads the answer instead of a reset.
      if (!req.readableEnded) req.resume();
      if (err instanceof DomainError && err.expose) {
        const { status } = httpErrorAnswer(err.kind);
        answer(res, status, { code: status, message: publicMessage(err, currentRequestId()) });
      } else {
        this.logger.error({ err, method: req.method, url: req.url }, 'volume content request failed');
        answer(res, 500, { code: 500, message: internalErrorMessage(currentRequestId()) });
      }
    });
  }

  private authorized(req: IncomingMessage, volumeId: string): boolean {
    if (hasValidApiKey(req, this.apiKey)) return true;
    const auth = headerValues(req, 'authorization');
    if (auth.length !== 1) return false;
    const m = /^Bearer ([^\s]+)$/.exec(auth[0]!);
    return m !== null && this.volumes.tokenMatches(volumeId, m[1]!);
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // The raw path, not a parsed URL: URL parsing would resolve `%2e%2e` segments into another path.
    const rawUrl = req.url ?? '/';
    const q = rawUrl.indexOf('?');
    const m = PATH_RE.exec(q === -1 ? rawUrl : rawUrl.slice(0, q));
    if (!m) throw new DomainError(ErrorKind.NotFound, 'no such volume content route');
    const volumeId = m[1]!;
    const kind = m[2] as 'dir' | 'path' | 'file';
    // The token check comes first: an unauthorised caller learns nothing about which volumes exist.
    if (!isSandboxId(volumeId) || !this.authorized(req, volumeId)) {
      answer(
        res,
        401,
        { code: 401, message: 'a valid volume token (Authorization: Bearer) is required' },
        true,
      );
      if (!req.readableEnded) req.resume();
      return;
    }
    const query = new URLSearchParams(q === -1 ? '' : rawUrl.slice(q + 1));
    const path = query.get('path');
    if (path === null) throw invalid('the path query parameter is required');
    const files = new VolumeFiles(await this.volumes.dirOf(volumeId), this.volumes.store.ownerRange);
    const method = req.method ?? 'GET';
    const route = `${method} ${kind}`;
    switch (route) {
      case 'GET dir':
        return answer(res, 200, await files.list(path, intParam(query, 'depth') ?? 1));
      case 'POST dir':
        return answer(
          res,
          201,
          await files.makeDir(path, { ...ownership(query), force: boolParam(query, 'force') }),
        );
      case 'GET path':
        return answer(res, 200, await files.stat(path));
      case 'PATCH path': {
        const body = await jsonBody(req);
        const own: Ownership = {};
        for (const k of ['uid', 'gid', 'mode'] as const) {
          const v = optionalInt(body, k);
          if (v !== undefined) own[k] = v;
        }
        return answer(res, 200, await files.updateMetadata(path, own));
      }
      case 'DELETE path':
        await files.remove(path);
        return answer(res, 204);
      case 'GET file': {
        const { stream } = await files.readFile(path);
        const requestId = currentRequestId();
        res.writeHead(200, {
          ...(requestId ? { 'x-request-id': requestId } : {}),
          // No content-length: a sandbox may be writing the file while it is read.
          'content-type': 'application/octet-stream',
        });
        stream.on('error', () => res.destroy());
        res.on('close', () => stream.destroy());
        stream.pipe(res);
        return;
      }
      case 'PUT file': {
        const st = await files.writeFile(path, req, {
          ...ownership(query),
          force: boolParam(query, 'force'),
          // No quota on a shared directory: the content API is where its size limit is kept (docs/volumes.md).
          ...(this.volumes.store.kind === 'node'
            ? {}
            : { limitBytes: this.volumes.settings.maxSizeMB * 1024 * 1024 }),
        });
        return answer(res, 201, st);
      }
      default:
        throw new DomainError(
          ErrorKind.InvalidArgument,
          `${method} is not a method of /volumecontent/{volumeID}/${kind}`,
        );
    }
  }
}
