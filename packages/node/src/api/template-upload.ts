// `PUT /templates/{templateID}/files/{hash}/upload?token=…`: where the SDK uploads COPY files. The SDK sends no
// API key here (the link stands in for E2B's presigned storage URL), so the request is served before the
// control plane's API-key check, authorised by the signed, expiring token in the link; and the body streams to
// disk instead of being parsed by the control plane.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { httpErrorAnswer } from '@aenv/protocol';
import type { DataPlane } from '@aenv/proxy';
import type { Logger } from '../util/log.js';
import { currentRequestId } from '../util/request-context.js';
import { isFilesHash, UploadError, type TemplateFileStore } from '../template/file-store.js';
import { internalErrorMessage } from './errors.js';

const PATH_RE = /^\/templates\/([^/?#]+)\/files\/([^/?#]+)\/upload$/;

/** The most of a refused upload's body read (and dropped) so that its client gets the answer. */
const DRAIN_MAX_BYTES = 256 * 1024 * 1024;

export function isUploadPath(url: string | undefined): boolean {
  const path = (url ?? '').split('?', 1)[0]!;
  return PATH_RE.test(path);
}

function answer(res: ServerResponse, status: number, message?: string, close = false): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = message === undefined ? '' : JSON.stringify({ code: status, message });
  const requestId = currentRequestId();
  res.writeHead(status, {
    ...(requestId ? { 'x-request-id': requestId } : {}),
    'content-length': String(Buffer.byteLength(body)),
    ...(body ? { 'content-type': 'application/json' } : {}),
    ...(close ? { connection: 'close' } : {}),
  });
  res.end(body);
}

/** Handles upload requests (one of the front door's data-plane handlers, front-door/data-planes.ts). */
export class TemplateUploadEndpoint implements DataPlane {
  constructor(
    private readonly files: TemplateFileStore,
    private readonly logger: Logger,
  ) {}

  claims(req: IncomingMessage): boolean {
    return isUploadPath(req.url);
  }

  upgrade(_req: IncomingMessage, socket: Duplex, _head: Buffer): void {
    const body = JSON.stringify({ code: 400, message: 'upload links do not accept WebSocket upgrades' });
    socket.end(
      'HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    this.upload(req, res).catch((err: unknown) => {
      // Nothing of the failure reaches the client but the request id; the log has the details.
      this.logger.error({ err, url: req.url }, 'template file upload failed');
      answer(res, 500, internalErrorMessage(currentRequestId()), true);
      if (!req.readableEnded) req.resume();
    });
  }

  private async upload(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // The raw path, not a parsed URL: URL parsing would resolve `%2e%2e` segments into another path.
    const rawUrl = req.url ?? '/';
    const q = rawUrl.indexOf('?');
    const m = PATH_RE.exec(q === -1 ? rawUrl : rawUrl.slice(0, q));
    if (!m) return answer(res, 404, 'not an upload link', true);
    const query = new URLSearchParams(q === -1 ? '' : rawUrl.slice(q + 1));
    // Errors before the body was read close the connection: the unread body must not be parsed as a request.
    if (req.method !== 'PUT')
      return answer(res, 405, `method ${req.method} not allowed: upload with PUT`, true);
    let templateId: string;
    try {
      templateId = decodeURIComponent(m[1]!);
    } catch {
      return answer(res, 400, 'invalid upload link: the template id is not valid percent-encoding', true);
    }
    const hash = m[2]!;
    if (!isFilesHash(hash)) return answer(res, 400, `invalid files hash ${JSON.stringify(hash)}`, true);
    const verdict = this.files.verifyToken(templateId, hash, query.get('token') ?? '');
    if (verdict !== 'ok') {
      return answer(
        res,
        403,
        verdict === 'expired' ? 'the upload link has expired' : 'invalid upload link',
        true,
      );
    }
    const lengthHeader = req.headers['content-length'];
    const declared = lengthHeader === undefined ? undefined : Number(lengthHeader);
    if (declared !== undefined && !(Number.isSafeInteger(declared) && declared >= 0)) {
      return answer(res, 400, 'invalid Content-Length', true);
    }
    const started = Date.now();
    try {
      const stored = await this.files.store(hash, req, declared);
      this.logger.info(
        { templateId, hash, bytes: stored.size, gzip: stored.gzip, ms: Date.now() - started },
        'template files uploaded',
      );
      answer(res, 200);
    } catch (e) {
      // Every upload error is meant for the client, a 507 (no room under the artefact quota) too.
      if (!(e instanceof UploadError)) throw e;
      // A refused body still on its way is read and dropped when its declared length is bounded, so the
      // client can finish writing and read the answer: closing at once resets the connection under its write
      // (EPIPE), often before it has read why. An unbounded or endless one is cut off as before.
      const drain = !req.readableEnded && declared !== undefined && declared <= DRAIN_MAX_BYTES;
      answer(res, httpErrorAnswer(e.kind).status, e.message, !req.readableEnded && !drain);
      if (!req.readableEnded) req.resume();
    }
  }
}
