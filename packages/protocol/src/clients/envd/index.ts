export * from './rest.js';
export * from './rpc.js';
// The RPC client's failures are ConnectErrors of this package's copy of @connectrpc/connect: callers that
// classify them (`instanceof`, `code`) take the class from here, not from a copy of their own.
export { Code, ConnectError } from '@connectrpc/connect';
