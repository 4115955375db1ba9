/**
 * The envd protocol version we advertise. The e2b SDK gates features on it (recursive watch ≥0.1.4,
 * closeStdin ≥0.5.2, octet-stream uploads ≥0.5.7, metadata ≥0.6.2, watch entries ≥0.6.3, network mounts
 * ≥0.6.4); we implement everything up to E2B's envd 0.6.13, so the server reports this as `envdVersion`.
 */
export const ENVD_VERSION = '0.6.13';

/** Where the tools directory is mounted (read-only) inside every sandbox. */
export const AGENTENV_MOUNT = '/agentenv';
