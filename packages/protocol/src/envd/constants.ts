/** Port envd listens on inside every sandbox (E2B's envd port). */
export const ENVD_PORT = 49983;

/**
 * `PATH` of a sandbox whose image sets none: envd's processes, the container's init environment and template
 * build steps all start from it (the Debian default, as E2B's images have it).
 */
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
