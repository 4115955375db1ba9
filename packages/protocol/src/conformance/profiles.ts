import type { SandboxProfile } from './target.js';

/** Raw Connect and REST cases: an open sandbox whose processes see FROM_INIT=1. */
export const WIRE: SandboxProfile = {
  name: 'wire',
  secure: false,
  envVars: { FROM_INIT: '1' },
  isolated: false,
};

/** envd's access-token rules. */
export const SECURE: SandboxProfile = { name: 'secure', secure: true, envVars: {}, isolated: false };

/** The e2b SDK against envd: a sandbox of its own with `user` as the default user. */
export const SDK: SandboxProfile = {
  name: 'sdk',
  secure: false,
  envVars: { GLOBAL_VAR: 'from-init' },
  isolated: true,
};

/** The node's own envd clients: a sandbox of their own, since they re-run /init on it. */
export const CLIENTS: SandboxProfile = { name: 'clients', secure: false, envVars: {}, isolated: false };
