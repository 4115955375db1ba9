/** Port envd listens on inside every sandbox (E2B's envd port). */
export const ENVD_PORT = 49983;

/**
 * `PATH` of a sandbox whose image sets none: envd's processes, the container's init environment and template
 * build steps all start from it (the Debian default, as E2B's images have it).
 */
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * The envd protocol version we advertise. The e2b SDK gates features on it (recursive watch ≥0.1.4,
 * closeStdin ≥0.5.2, octet-stream uploads ≥0.5.7, metadata ≥0.6.2, watch entries ≥0.6.3, network mounts
 * ≥0.6.4); we implement everything up to E2B's envd 0.6.13, so the node reports this as `envdVersion`.
 */
export const ENVD_VERSION = '0.6.13';

/** Where the tools directory is mounted (read-only) inside every sandbox. */
export const AGENTENV_MOUNT = '/agentenv';
