// @aenv/envd holds the in-sandbox daemon only: its bundle dist/envd.cjs and the native sources under native/
// are what the node ships in the tools dir (packages/node/src/tools/). Nothing of it runs on the host.
export { ENVD_VERSION, AGENTENV_MOUNT } from './version.js';
