// The gateway's settings: the cluster JSON file (`-config`, shared with the scheduler; docs/cluster.md),
// then the GATEWAY_* environment, then the API key (docs/cluster.md#the-gateway: env, else the mounted secret;
// a gateway never generates one).
import { closeSync, constants, fstatSync, openSync, readFileSync, readSync } from 'node:fs';
import {
  applyConfigDocument,
  applyEnvironment,
  ClusterConfigError,
  defaultClusterConfig,
  validateGatewaySection,
  type ClusterConfig,
} from '@aenv/scheduler';

const MAX_CONFIG_BYTES = 1024 * 1024;
export const API_KEY_ENV = 'AENV_API_KEY';
export const EXTERNAL_API_KEY_PATH = '/run/secrets/api-key';
const API_KEY_CHARS = /^[A-Za-z0-9._~-]{32,256}$/;

export function loadGatewayConfig(path: string | undefined, env: NodeJS.ProcessEnv): ClusterConfig {
  const config = defaultClusterConfig();
  if (path) {
    let text: string;
    try {
      const data = readFileSync(path);
      if (data.length > MAX_CONFIG_BYTES)
        throw new ClusterConfigError(`config file ${path} is larger than ${MAX_CONFIG_BYTES} bytes`);
      text = data.toString('utf8');
    } catch (e) {
      if (e instanceof ClusterConfigError) throw e;
      throw new ClusterConfigError(`cannot read config file ${path}: ${(e as Error).message}`);
    }
    let doc: unknown;
    try {
      doc = JSON.parse(text);
    } catch (e) {
      throw new ClusterConfigError(`config file ${path} is not valid JSON: ${(e as Error).message}`);
    }
    applyConfigDocument(config, doc);
  }
  applyEnvironment(config, env);
  validateGatewaySection(config);
  return config;
}

function checkKey(key: string, source: string): string {
  if (!API_KEY_CHARS.test(key))
    throw new ClusterConfigError(
      `invalid API key from ${source}: must be 32-256 characters of [A-Za-z0-9._~-]`,
    );
  return key;
}

/** `AENV_API_KEY`, else the mounted `/run/secrets/api-key` (one trailing newline stripped). */
export function resolveGatewayApiKey(env: NodeJS.ProcessEnv, externalPath = EXTERNAL_API_KEY_PATH): string {
  const fromEnv = env[API_KEY_ENV];
  if (fromEnv !== undefined) return checkKey(fromEnv, API_KEY_ENV);
  let fd: number;
  try {
    // Non-blocking: a FIFO at the path must not hang startup.
    fd = openSync(externalPath, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT')
      throw new ClusterConfigError(
        `no API key: set ${API_KEY_ENV} or mount the nodes' key at ${externalPath}`,
      );
    throw new ClusterConfigError(`cannot read API key file ${externalPath}: ${(e as Error).message}`);
  }
  try {
    if (!fstatSync(fd).isFile())
      throw new ClusterConfigError(`API key file ${externalPath} must be a regular file`);
    const buf = Buffer.alloc(259);
    const n = readSync(fd, buf, 0, buf.length, 0);
    if (n > 258) throw new ClusterConfigError(`API key file ${externalPath} is too large`);
    return checkKey(
      buf
        .subarray(0, n)
        .toString('utf8')
        .replace(/\r?\n$/, ''),
      externalPath,
    );
  } finally {
    closeSync(fd);
  }
}
