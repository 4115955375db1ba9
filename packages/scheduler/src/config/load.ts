import { readFileSync } from 'node:fs';
import {
  applyConfigDocument,
  applyEnvironment,
  ClusterConfigError,
  defaultClusterConfig,
  validateGatewaySection,
  validateScheduler,
  type ClusterConfig,
} from './cluster-config.js';

const MAX_CONFIG_BYTES = 1024 * 1024;

/** Defaults, then the JSON file (if any), then the environment; then the startup checks. */
export function loadSchedulerConfig(opts: {
  path?: string | undefined;
  queryOnly: boolean;
  env?: NodeJS.ProcessEnv;
}): ClusterConfig {
  const config = defaultClusterConfig();
  if (opts.path) {
    let text: string;
    try {
      const data = readFileSync(opts.path);
      if (data.length > MAX_CONFIG_BYTES)
        throw new ClusterConfigError(`config file ${opts.path} is larger than ${MAX_CONFIG_BYTES} bytes`);
      text = data.toString('utf8');
    } catch (e) {
      if (e instanceof ClusterConfigError) throw e;
      throw new ClusterConfigError(`cannot read config file ${opts.path}: ${(e as Error).message}`);
    }
    let doc: unknown;
    try {
      doc = JSON.parse(text);
    } catch (e) {
      throw new ClusterConfigError(`config file ${opts.path} is not valid JSON: ${(e as Error).message}`);
    }
    applyConfigDocument(config, doc);
  }
  applyEnvironment(config, opts.env ?? process.env);
  validateScheduler(config, opts.queryOnly);
  validateGatewaySection(config);
  return config;
}
