// Headers of the control plane and of the data-plane routing (docs/networking.md#data-plane-routing).

/** The caller's API key on every control-plane route except `/health`. */
export const API_KEY_HEADER = 'x-api-key';

/** The created or connected sandbox's id on create/connect answers (AgentENV). */
export const SANDBOX_ID_RESPONSE_HEADER = 'x-agentenv-sandbox-id';

/** Routes a data-plane request to a sandbox and port without a sandbox host name (what the SDKs send). */
export const SANDBOX_ID_HEADER = 'e2b-sandbox-id';
export const SANDBOX_PORT_HEADER = 'e2b-sandbox-port';

/** The traffic token of a sandbox whose ports are not public (`network.allowPublicTraffic: false`). */
export const TRAFFIC_ACCESS_TOKEN_HEADER = 'e2b-traffic-access-token';
