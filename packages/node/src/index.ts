export { runServer, type RunServerOptions } from './server.js';
// The tools dir the node mounts into every sandbox (envd's own tests build one the same way).
export { COMPACT_MMAP_LIB, ensureToolsDir, ENVD_NODE_FLAGS } from './tools/ensure-tools-dir.js';
export type { EnsureToolsDirOptions, ToolsDir, ToolsLogger } from './tools/ensure-tools-dir.js';
