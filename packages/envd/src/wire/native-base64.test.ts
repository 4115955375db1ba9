import { randomBytes } from 'node:crypto';
import { base64Encode } from '@bufbuild/protobuf/wire';
import { describe, expect, it } from 'vitest';
import { toBase64 } from './native-base64.js';

// @bufbuild/protobuf's own encoder is the reference: on this Node it is its JavaScript loop.
const encodings = [
  ['std', {}],
  ['std_raw', { omitPadding: true }],
  ['url', { alphabet: 'base64url', omitPadding: true }],
] as const;

describe('toBase64 backed by Buffer', () => {
  it('encodes as @bufbuild/protobuf does, for every length and offset', () => {
    const pool = randomBytes(200);
    for (let offset = 0; offset < 4; offset++)
      for (let length = 0; length <= 70; length++) {
        const bytes = new Uint8Array(pool.buffer, pool.byteOffset + offset, length);
        for (const [name, options] of encodings)
          expect(toBase64(bytes, options), `${name} offset ${offset} length ${length}`).toBe(
            base64Encode(bytes, name),
          );
      }
  });

  it('pads base64url unless told not to, as the spec says', () => {
    expect(toBase64(new Uint8Array([0xfb, 0xff]), { alphabet: 'base64url' })).toBe('-_8=');
    expect(toBase64(new Uint8Array([0xfb]), { alphabet: 'base64url' })).toBe('-w==');
    expect(toBase64(new Uint8Array([0xfb, 0xff]))).toBe('+/8=');
  });

  it('refuses what the spec refuses', () => {
    expect(() => toBase64(new Uint8Array(1), { alphabet: 'hex' as 'base64' })).toThrow(TypeError);
    expect(() => toBase64(new Uint8Array(1), 'base64' as never)).toThrow(TypeError);
    expect(() => toBase64([1, 2] as unknown as Uint8Array)).toThrow(TypeError);
  });
});
