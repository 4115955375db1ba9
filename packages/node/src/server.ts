import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawn } from 'node:child_process';
import {
  ConfigError,
  containerModeNotice,
  dependenciesOfMode,
  loadConfig,
  readDepsManifest,
  type ConfigFlags,
} from '@aenv/config';
import { createLogger, type Logger } from './util/log.js';
import { installProcessGuards } from './util/process-guard.js';
import { runtimeFactory } from './runtime/index.js';
import { reporterSettings } from './cluster/reporter-settings.js';
import { volumeSettings } from './volume/index.js';
import { startNode } from './composition/start-node.js';
import { prepareTools } from './tools/start.js';

export interface RunServerOptions {
  configPath?: string;
  setupOnly: boolean;
  /** Log unhandled rejections and uncaught exceptions and keep running (the `aenv server` process). */
  processGuards?: boolean;
  flags?: Omit<ConfigFlags, 'config'>;
  env?: NodeJS.ProcessEnv;
}

const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** What config/deps_manifest.toml lists for the mode: logged by `--setup-only` once setup-host.sh installed it. */
function reportDependencies(mode: string, logger: Logger): void {
  const manifest = join(REPO_ROOT, 'config', 'deps_manifest.toml');
  const deps = dependenciesOfMode(readDepsManifest(manifest), mode).map((d) => ({
    name: d.name,
    version: d.version,
    source: d.suite ? `${d.source} ${d.suite}` : d.source,
    package: d.package,
    group: d.group,
  }));
  logger.info({ manifest, mode, deps }, 'host dependencies');
}

function runSetupScript(depsPath: string, mode: string, logger: Logger): Promise<number> {
  const script = join(REPO_ROOT, 'scripts', 'setup-host.sh');
  if (!existsSync(script)) {
    logger.error({ script }, 'host setup script not found');
    return Promise.resolve(1);
  }
  return new Promise((resolve) => {
    const child = spawn(script, ['--deps-path', depsPath, '--mode', mode], { stdio: 'inherit' });
    child.on('close', (code) => resolve(code ?? 1));
    child.on('error', (err) => {
      logger.error({ err }, 'host setup failed to start');
      resolve(1);
    });
  });
}

/** `aenv server`: returns the process exit code. */
export async function runServer(opts: RunServerOptions): Promise<number> {
  let loaded;
  try {
    loaded = loadConfig({ configPath: opts.configPath, env: opts.env, flags: opts.flags ?? {} });
    // Refused before anything touches the host.
    runtimeFactory(loaded.config.virtualization_mode);
    reporterSettings(loaded.config);
    volumeSettings(loaded.config);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`aenv: invalid configuration:\n${e.message}\n`);
      return 2;
    }
    throw e;
  }
  const { config } = loaded;
  const logger = createLogger(config.log_format, config.log_level);
  if (opts.processGuards) installProcessGuards(logger);
  logger.info({ config: loaded.configPath }, 'configuration loaded');
  for (const w of loaded.warnings) logger.warn(w);
  const notice = containerModeNotice(config, loaded.keysWithoutEffectInContainerMode);
  if (notice) logger.info(notice);

  if (opts.setupOnly) {
    const code = await runSetupScript(config.deps_path, config.virtualization_mode, logger);
    if (code !== 0) return code;
    reportDependencies(config.virtualization_mode, logger);
    const tools = await prepareTools(config, logger);
    logger.info({ dir: tools.dir, version: tools.version }, 'setup complete');
    return 0;
  }

  // Everything the server (and the tools it runs) creates is private unless made otherwise on purpose:
  // the few paths sandboxes must reach get their modes explicitly (docs/security.md, "local host users").
  process.umask(0o077);
  let node: { close(): Promise<void> };
  try {
    node = await startNode(config, logger, REPO_ROOT);
  } catch (err) {
    logger.fatal({ err }, 'aenv server failed to start');
    return 1;
  }
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) {
        logger.warn({ signal }, 'second signal: exiting without finishing the shutdown');
        process.exit(130);
      }
      stopping = true;
      logger.info({ signal }, 'signal received');
      node.close().then(
        () => resolve(0),
        (err: unknown) => {
          logger.error({ err }, 'shutdown failed');
          resolve(1);
        },
      );
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
}
