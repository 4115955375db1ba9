// The wire contract of aenv, defined once: envd's REST + RPC (`envd/`, also importable alone as
// `@aenv/protocol/envd`) and the E2B control plane (`api/`).
export * from './envd/index.js';
export * from './api/index.js';
