import { describe, expect, it } from 'vitest';
import { Code, ConnectError } from '@connectrpc/connect';
import { decodeUnaryFrame, encodeUnaryFrame } from './grpc-unary-frame.js';

const codeOf = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ConnectError);
    return { code: (e as ConnectError).code, message: (e as ConnectError).rawMessage };
  }
  throw new Error('did not throw');
};

describe('unary gRPC frame', () => {
  it('round-trips a message, the empty one too', () => {
    const frame = encodeUnaryFrame(Uint8Array.from([1, 2, 3]));
    expect([...frame]).toEqual([0, 0, 0, 0, 3, 1, 2, 3]);
    expect([...decodeUnaryFrame(frame, 'output')]).toEqual([1, 2, 3]);
    expect(decodeUnaryFrame(encodeUnaryFrame(new Uint8Array(0)), 'input').length).toBe(0);
  });

  it('refuses what is not exactly one uncompressed frame, blaming the side that sent it', () => {
    expect(codeOf(() => decodeUnaryFrame(Buffer.from([0, 0, 0]), 'input'))).toEqual({
      code: Code.Unimplemented,
      message: 'protocol error: missing input message for unary method',
    });
    expect(codeOf(() => decodeUnaryFrame(Buffer.from([1, 0, 0, 0, 0]), 'output')).code).toBe(Code.Internal);
    const short = Buffer.from([0, 0, 0, 0, 4, 9]);
    expect(codeOf(() => decodeUnaryFrame(short, 'input')).code).toBe(Code.InvalidArgument);
    expect(codeOf(() => decodeUnaryFrame(short, 'output')).code).toBe(Code.Internal);
    expect(codeOf(() => decodeUnaryFrame(Buffer.from([0, 0, 0, 0, 0, 7]), 'output'))).toEqual({
      code: Code.Unimplemented,
      message: 'protocol error: received extra output message for unary method',
    });
  });
});
