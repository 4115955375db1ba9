import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createLogger, type LogLevel } from './logger.js';
import { loadNative } from './native.js';
import type { EnvdOptions } from './server.js';
import { ENVD_PORT } from '@aenv/protocol/envd';

/**
 * envd's configuration from its environment (set by the sandbox runtime on aenv-init, which envd
 * inherits) and its location in the tools dir (<tools>/envd/envd.cjs):
 *   ENVD_PORT (49983), ENVD_HOST (0.0.0.0), ENVD_LOG_LEVEL (info), ENVD_STATE_PATH (/run/agentenv/envd.json),
 *   E2B_SANDBOX_ID, E2B_TEMPLATE_ID, PATH, AENV_TOOLS_DIR (default: the parent of envd's directory),
 *   AENV_ENVD_INIT_KEY (the node's /init credential; none = /init is open as in E2B).
 */
export function optionsFromEnv(env: NodeJS.ProcessEnv, envdDir: string): EnvdOptions {
  const port = env.ENVD_PORT ? Number(env.ENVD_PORT) : ENVD_PORT;
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new Error(`invalid ENVD_PORT '${env.ENVD_PORT}'`);
  const toolsDir = env.AENV_TOOLS_DIR || dirname(envdDir);
  const addon = join(envdDir, 'aenv_native.node');
  const level = (env.ENVD_LOG_LEVEL as LogLevel | undefined) ?? 'info';
  return {
    port,
    host: env.ENVD_HOST || '0.0.0.0',
    initPath: join(toolsDir, 'bin', 'aenv-init'),
    native: existsSync(addon) ? loadNative(addon) : undefined,
    statePath: env.ENVD_STATE_PATH ?? '/run/agentenv/envd.json',
    sandboxId: env.E2B_SANDBOX_ID,
    templateId: env.E2B_TEMPLATE_ID,
    ...(env.AENV_ENVD_INIT_KEY ? { bootInitKey: env.AENV_ENVD_INIT_KEY } : {}),
    basePath: env.PATH,
    logger: createLogger(['debug', 'info', 'warn', 'error'].includes(level) ? level : 'info'),
  };
}
