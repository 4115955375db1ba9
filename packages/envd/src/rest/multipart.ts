/**
 * A streaming multipart/form-data reader: yields parts one after another, each with its headers and
 * an async iterable of its body. A part's body must be consumed (or skipped by moving on) before the
 * next part is read; memory stays bounded by one network chunk plus the boundary.
 */
export interface MultipartPart {
  headers: Map<string, string>;
  /** `name` and `filename` from Content-Disposition, as sent (Go keeps directories in filename). */
  name: string | undefined;
  filename: string | undefined;
  body: AsyncIterable<Buffer>;
}

export class MultipartError extends Error {}

const MAX_HEADER_BYTES = 16 * 1024;

export function boundaryOf(contentType: string | undefined): string | undefined {
  if (!contentType) return undefined;
  const m = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return m?.[1] ?? m?.[2];
}

/** Parses `form-data; name="file"; filename="a/b.txt"` (quoted or token values, backslash escapes). */
export function parseContentDisposition(value: string): { name?: string; filename?: string } {
  const out: { name?: string; filename?: string } = {};
  const re = /;\s*([^=;\s]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;]*))/g;
  for (let m = re.exec(value); m; m = re.exec(value)) {
    const key = m[1]!.toLowerCase();
    const v = m[2] !== undefined ? m[2].replace(/\\(.)/g, '$1') : m[3]!.trim();
    if (key === 'name') out.name = v;
    else if (key === 'filename') out.filename = v;
    else if (key === 'filename*' && out.filename === undefined) {
      const ext = /^[^']*'[^']*'(.*)$/.exec(v);
      if (ext) {
        try {
          out.filename = decodeURIComponent(ext[1]!);
        } catch {
          /* malformed: ignore */
        }
      }
    }
  }
  return out;
}

export async function* readMultipart(
  source: AsyncIterable<Buffer>,
  boundary: string,
): AsyncGenerator<MultipartPart> {
  const iterator = source[Symbol.asyncIterator]();
  let buf: Buffer = Buffer.alloc(0);
  let ended = false;
  const pull = async (): Promise<boolean> => {
    if (ended) return false;
    const next = await iterator.next();
    if (next.done) {
      ended = true;
      return false;
    }
    buf = buf.length ? Buffer.concat([buf, next.value]) : next.value;
    return true;
  };

  // Preamble: skip to the first "--boundary".
  const first = Buffer.from(`--${boundary}`);
  for (;;) {
    const i = buf.indexOf(first);
    if (i !== -1) {
      buf = buf.subarray(i + first.length);
      break;
    }
    if (buf.length > first.length) buf = buf.subarray(buf.length - first.length);
    if (!(await pull())) throw new MultipartError('multipart body has no boundary');
  }

  const delimiter = Buffer.from(`\r\n--${boundary}`);
  for (;;) {
    // After a boundary: "--" ends the body, otherwise CRLF then part headers.
    while (buf.length < 2) if (!(await pull())) throw new MultipartError('unexpected end of multipart body');
    if (buf[0] === 0x2d && buf[1] === 0x2d) return;
    let headerEnd: number;
    while ((headerEnd = buf.indexOf('\r\n\r\n')) === -1) {
      if (buf.length > MAX_HEADER_BYTES) throw new MultipartError('multipart part headers too large');
      if (!(await pull())) throw new MultipartError('unexpected end of multipart headers');
    }
    const rawHeaders = buf.subarray(0, headerEnd).toString('utf8');
    buf = buf.subarray(headerEnd + 4);
    const headers = new Map<string, string>();
    for (const line of rawHeaders.split('\r\n')) {
      const colon = line.indexOf(':');
      if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
    const disposition = parseContentDisposition(headers.get('content-disposition') ?? '');

    let partDone = false;
    async function* body(): AsyncGenerator<Buffer> {
      for (;;) {
        const i = buf.indexOf(delimiter);
        if (i !== -1) {
          if (i > 0) yield buf.subarray(0, i);
          buf = buf.subarray(i + delimiter.length);
          partDone = true;
          return;
        }
        // Keep a tail that could be the start of the delimiter.
        const safe = buf.length - (delimiter.length - 1);
        if (safe > 0) {
          const out = buf.subarray(0, safe);
          buf = buf.subarray(safe);
          yield out;
        }
        if (!(await pull())) throw new MultipartError('unexpected end of multipart part');
      }
    }
    const it = body();
    yield { headers, name: disposition.name, filename: disposition.filename, body: it };
    // Skip whatever the consumer did not read.
    if (!partDone) for await (const _chunk of it) void _chunk;
  }
}
