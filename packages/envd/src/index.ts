// Public API of @aenv/envd for the aenv server (host side). The daemon itself is the bundle
// dist/envd.cjs, shipped in the tools dir; nothing here loads it.
export { ENVD_VERSION, AGENTENV_MOUNT } from './version.js';
export { ensureToolsDir, ENVD_NODE_FLAGS } from './tools/ensure-tools-dir.js';
export type { EnsureToolsDirOptions, ToolsDir, ToolsLogger } from './tools/ensure-tools-dir.js';
