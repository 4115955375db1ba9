// Part of envd's contract, defined in @aenv/protocol/envd; re-exported for envd's own modules.
export { ENVD_VERSION, AGENTENV_MOUNT } from '@aenv/protocol/envd';
