// The wire contract of aenv, defined once: envd's REST + RPC (`envd/`, also importable alone as
// `@aenv/protocol/envd`), the E2B control plane (`api/`), the clients of both (`clients/`), the cluster's
// scheduler.v1 service (served by `aenv scheduler`, called by nodes and gateways), the domain error kinds every
// process speaks (`errors/`) and the ids of aenv objects (`ids.ts`).
export * from './envd/index.js';
export * from './api/index.js';
export * from './clients/envd/index.js';
export * from './clients/api/index.js';
export * from './clients/scheduler/index.js';
export * from './gen/scheduler/v1/scheduler_pb.js';
export * from './errors/index.js';
export * from './ids.js';
export * from './volume-token.js';
export * from './grpc-unary-frame.js';
