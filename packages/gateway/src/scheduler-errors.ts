// How a failed scheduler call is answered (docs/cluster.md#how-the-gateway-routes): the gRPC code decides the status.
import { Code, ConnectError } from '@connectrpc/connect';

export interface ErrorAnswer {
  status: number;
  message: string;
}

export function schedulerErrorAnswer(err: unknown): ErrorAnswer {
  if (!(err instanceof ConnectError)) return { status: 502, message: 'scheduler unavailable' };
  switch (err.code) {
    case Code.InvalidArgument:
      return { status: 400, message: err.rawMessage };
    case Code.NotFound:
      return { status: 404, message: 'sandbox assignment not found' };
    case Code.Unavailable:
      // A scheduler that cannot be reached surfaces as Unavailable too; either way: try again later.
      return { status: 503, message: err.rawMessage || 'scheduler unavailable' };
    default:
      return { status: 502, message: 'scheduler error' };
  }
}

export function isNotFound(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.NotFound;
}
