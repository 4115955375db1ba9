// The wire contract of aenv, defined once: envd's REST + RPC (`envd/`, also importable alone as
// `@aenv/protocol/envd`), the E2B control plane (`api/`), the clients of both (`clients/`), and the cluster's
// scheduler.v1 service (served by `aenv scheduler`, called by nodes and gateways).
export * from './envd/index.js';
export * from './api/index.js';
export * from './clients/envd/index.js';
export * from './clients/api/index.js';
export * from './gen/scheduler/v1/scheduler_pb.js';
