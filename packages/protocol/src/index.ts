// The wire contract of aenv, defined once: envd's REST + RPC (`envd/`, also importable alone as
// `@aenv/protocol/envd`), the E2B control plane (`api/`), and the clients of both (`clients/`).
export * from './envd/index.js';
export * from './api/index.js';
export * from './clients/envd/index.js';
export * from './clients/api/index.js';
