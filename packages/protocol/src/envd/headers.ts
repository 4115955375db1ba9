// Headers of envd's REST and RPC surface (docs/envd.md, docs/security.md "envd /init").

/** The sandbox's envd access token (E2B): required on every call of a secure sandbox except the exempt ones. */
export const ACCESS_TOKEN_HEADER = 'x-access-token';

/** aenv: the node's credential for `POST /init`; envd refuses /init without it once it holds an init key. */
export const INIT_KEY_HEADER = 'x-aenv-init-key';

/** 401 message E2B's envd sends for a missing or wrong X-Access-Token (the node's proxy sends the same). */
export const ENVD_UNAUTHORIZED_MESSAGE =
  'unauthorized access, please provide a valid access token or method signing if supported';
