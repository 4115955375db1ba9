// Error kinds as gRPC statuses (grpc/doc/statuscodes.md), for the scheduler and the gateway (docs/errors.md).
// A status code is coarser than a kind: a relay carries the kind's code (`err.kind`) beside it to stay faithful.
import { ErrorKind } from './kinds.js';

/** The gRPC status codes aenv uses. */
export const GrpcStatus = {
  InvalidArgument: 3,
  DeadlineExceeded: 4,
  NotFound: 5,
  AlreadyExists: 6,
  PermissionDenied: 7,
  ResourceExhausted: 8,
  FailedPrecondition: 9,
  Aborted: 10,
  Internal: 13,
  Unavailable: 14,
  DataLoss: 15,
  Unauthenticated: 16,
} as const;

export type GrpcStatus = (typeof GrpcStatus)[keyof typeof GrpcStatus];

export const GRPC_STATUS_OF_KIND: Readonly<Record<ErrorKind, GrpcStatus>> = {
  [ErrorKind.InvalidArgument]: GrpcStatus.InvalidArgument,
  [ErrorKind.InvalidState]: GrpcStatus.FailedPrecondition,
  [ErrorKind.NotFound]: GrpcStatus.NotFound,
  [ErrorKind.AlreadyExists]: GrpcStatus.AlreadyExists,
  // A transition in progress: "retry at a higher level" is what ABORTED tells a client.
  [ErrorKind.Conflict]: GrpcStatus.Aborted,
  [ErrorKind.Corrupt]: GrpcStatus.DataLoss,
  [ErrorKind.PermissionDenied]: GrpcStatus.PermissionDenied,
  [ErrorKind.Unauthenticated]: GrpcStatus.Unauthenticated,
  // gRPC itself answers an oversized message with RESOURCE_EXHAUSTED.
  [ErrorKind.TooLarge]: GrpcStatus.ResourceExhausted,
  [ErrorKind.Unsupported]: GrpcStatus.InvalidArgument,
  [ErrorKind.ResourceExhausted]: GrpcStatus.ResourceExhausted,
  [ErrorKind.InsufficientStorage]: GrpcStatus.ResourceExhausted,
  [ErrorKind.Internal]: GrpcStatus.Internal,
  // gRPC's own mapping of an HTTP 502.
  [ErrorKind.BadUpstream]: GrpcStatus.Unavailable,
  [ErrorKind.Unavailable]: GrpcStatus.Unavailable,
  [ErrorKind.ShuttingDown]: GrpcStatus.Unavailable,
  [ErrorKind.Timeout]: GrpcStatus.DeadlineExceeded,
};
