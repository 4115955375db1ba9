// The one length-prefixed message of a unary gRPC call (a flag byte, a 4-byte big-endian length, the message),
// as the scheduler's lean client transport and its fast server path both read and write it.
import { Code, ConnectError } from '@connectrpc/connect';

/** `message` in a gRPC frame (uncompressed). */
export function encodeUnaryFrame(message: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(5 + message.length);
  frame[0] = 0;
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

/**
 * The message of the single frame `body` must hold, checked as gRPC does: one uncompressed frame, exactly as long
 * as its prefix says. `side` names whose message it is (a server reads the input, a client the output); a short
 * request is the caller's fault (InvalidArgument), a short answer the peer's (Internal).
 */
export function decodeUnaryFrame(body: Buffer, side: 'input' | 'output'): Buffer {
  if (body.length < 5)
    throw new ConnectError(`protocol error: missing ${side} message for unary method`, Code.Unimplemented);
  if (body[0]! & 1)
    throw new ConnectError(
      'protocol error: received compressed message without grpc-encoding',
      Code.Internal,
    );
  const length = body.readUInt32BE(1);
  if (body.length < 5 + length)
    throw new ConnectError(
      'protocol error: premature end of message',
      side === 'input' ? Code.InvalidArgument : Code.Internal,
    );
  if (body.length > 5 + length)
    throw new ConnectError(
      `protocol error: received extra ${side} message for unary method`,
      Code.Unimplemented,
    );
  return body.subarray(5);
}
