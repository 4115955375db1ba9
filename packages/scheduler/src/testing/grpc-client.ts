// A gRPC client from another implementation than the server's (grpc-js, the proto loaded from the .proto
// file at run time): what the scheduler must interoperate with, like grpc-go in the reference's processes.
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as loader from '@grpc/proto-loader';

const PROTO = fileURLToPath(new URL('../../../protocol/proto/scheduler/v1/scheduler.proto', import.meta.url));

export interface RpcError {
  code: grpc.status;
  details: string;
}

/** Plain objects with the proto's snake_case names; 64-bit integers as strings. */
export type Plain = Record<string, unknown>;

export interface TestSchedulerClient {
  call(method: string, request: Plain): Promise<Plain>;
  /** Resolves with the error when the call fails, and fails when it succeeds. */
  fail(method: string, request: Plain): Promise<RpcError>;
  /** A call to any path with raw bytes as the message. */
  raw(path: string, body: Buffer): Promise<RpcError | Buffer>;
  close(): void;
}

const definition = loader.loadSync(PROTO, {
  keepCase: true,
  longs: String,
  enums: Number,
  defaults: true,
  oneofs: true,
});
type ServiceClient = grpc.Client &
  Record<
    string,
    (
      req: Plain,
      md: grpc.Metadata,
      opts: grpc.CallOptions,
      cb: (err: grpc.ServiceError | null, res: Plain) => void,
    ) => void
  >;
/** A call that hangs fails the test with the method's name instead of running into the test's timeout. */
const CALL_DEADLINE_MS = 30_000;
const Scheduler = (grpc.loadPackageDefinition(definition).scheduler as grpc.GrpcObject).v1 as grpc.GrpcObject;

export function schedulerClient(address: string): TestSchedulerClient {
  const ctor = Scheduler.Scheduler as unknown as new (
    addr: string,
    creds: grpc.ChannelCredentials,
    opts?: object,
  ) => ServiceClient;
  // The client would refuse to send over 4 MiB itself; the test wants the server to be the one refusing.
  const client = new ctor(address, grpc.credentials.createInsecure(), {
    'grpc.max_send_message_length': 64 * 1024 * 1024,
  });
  const invoke = (method: string, request: Plain) =>
    new Promise<{ err: grpc.ServiceError | null; res: Plain }>((resolve) => {
      const fn = client[method];
      if (!fn) throw new Error(`no method ${method}`);
      fn.call(client, request, new grpc.Metadata(), { deadline: Date.now() + CALL_DEADLINE_MS }, (err, res) =>
        resolve({ err, res }),
      );
    });
  return {
    async call(method, request) {
      const { err, res } = await invoke(method, request);
      if (err) throw new Error(`${method} failed: ${err.code} ${err.details}`);
      return res;
    },
    async fail(method, request) {
      const { err } = await invoke(method, request);
      if (!err) throw new Error(`${method} succeeded, expected an error`);
      return { code: err.code, details: err.details };
    },
    raw: (path, body) =>
      new Promise((resolve) => {
        client.makeUnaryRequest(
          path,
          (b: Buffer) => b,
          (b: Buffer) => b,
          body,
          new grpc.Metadata(),
          { deadline: Date.now() + CALL_DEADLINE_MS },
          (err, res) => resolve(err ? { code: err.code, details: err.details } : res!),
        );
      }),
    close: () => client.close(),
  };
}

export { grpc };
