import { describe, expect, it } from 'vitest';
import { boundaryOf, MultipartError, parseContentDisposition, readMultipart } from './multipart.js';

async function* chunked(buf: Buffer, size: number): AsyncGenerator<Buffer> {
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size);
}

async function parse(body: Buffer, boundary: string, chunk: number) {
  const parts: { name?: string; filename?: string; data: string }[] = [];
  for await (const p of readMultipart(chunked(body, chunk), boundary)) {
    const bufs: Buffer[] = [];
    for await (const b of p.body) bufs.push(b);
    parts.push({ name: p.name, filename: p.filename, data: Buffer.concat(bufs).toString('latin1') });
  }
  return parts;
}

describe('multipart reader', () => {
  it('reads what undici FormData produces, whatever the chunking', async () => {
    const form = new FormData();
    form.append('file', new Blob(['hello\r\n--not-a-boundary\r\n']), 'dir/a.txt');
    form.append('field', 'value');
    form.append('file', new Blob([new Uint8Array([0, 13, 10, 45, 45, 255])]), '/abs/b.bin');
    const res = new Response(form);
    const boundary = boundaryOf(res.headers.get('content-type') ?? '')!;
    const body = Buffer.from(await res.arrayBuffer());
    const expected = [
      { name: 'file', filename: 'dir/a.txt', data: 'hello\r\n--not-a-boundary\r\n' },
      { name: 'field', filename: undefined, data: 'value' },
      {
        name: 'file',
        filename: '/abs/b.bin',
        data: Buffer.from([0, 13, 10, 45, 45, 255]).toString('latin1'),
      },
    ];
    for (const size of [1, 2, 3, 7, 16, 64, 100000])
      expect(await parse(body, boundary, size)).toEqual(expected);
  });

  it('skips unread part bodies', async () => {
    const body = Buffer.from(
      '--b\r\nContent-Disposition: form-data; name="a"\r\n\r\nAAA\r\n--b\r\nContent-Disposition: form-data; name="c"\r\n\r\nCCC\r\n--b--\r\n',
    );
    const names: string[] = [];
    for await (const p of readMultipart(chunked(body, 5), 'b')) names.push(p.name!);
    expect(names).toEqual(['a', 'c']);
  });

  it('rejects truncated bodies', async () => {
    const body = Buffer.from('--b\r\nContent-Disposition: form-data; name="a"\r\n\r\nAAA');
    await expect(parse(body, 'b', 4)).rejects.toThrow(MultipartError);
    await expect(parse(Buffer.from('no boundary here'), 'b', 4)).rejects.toThrow(MultipartError);
  });

  it('parses Content-Disposition parameters', () => {
    expect(parseContentDisposition('form-data; name="file"; filename="a \\"q\\".txt"')).toEqual({
      name: 'file',
      filename: 'a "q".txt',
    });
    expect(parseContentDisposition("form-data; name=file; filename*=UTF-8''%C3%A9.txt")).toEqual({
      name: 'file',
      filename: 'é.txt',
    });
    expect(boundaryOf('multipart/form-data; boundary="x y"')).toBe('x y');
    expect(boundaryOf('multipart/form-data')).toBeUndefined();
  });
});
