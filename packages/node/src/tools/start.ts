import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { AenvConfig } from '@aenv/config';
import { ensureToolsDir } from './ensure-tools-dir.js';
import type { ToolsMount } from '../runtime/index.js';
import { makeReadOnlyForAll } from '../util/private-tree.js';
import type { Logger } from '../util/log.js';

/** The tools mount: `[runtime].tools_dir` when it holds a built one, else the one under `<deps>/tools/`. */
export async function prepareTools(
  config: Pick<AenvConfig, 'runtime' | 'deps_path'>,
  logger: Logger,
): Promise<ToolsMount> {
  if (config.runtime.tools_dir && existsSync(join(config.runtime.tools_dir, 'VERSION'))) {
    const version = (await readFile(join(config.runtime.tools_dir, 'VERSION'), 'utf8')).trim();
    return { dir: config.runtime.tools_dir, version };
  }
  return ensureToolsDir({ depsPath: config.deps_path, logger });
}

/** The tools mount, readable by every sandbox uid (it is mounted read-only into each; built under umask 077). */
export async function startTools(
  config: Pick<AenvConfig, 'runtime' | 'deps_path'>,
  logger: Logger,
): Promise<ToolsMount> {
  const tools = await prepareTools(config, logger);
  await makeReadOnlyForAll(tools.dir);
  logger.info({ dir: tools.dir, version: tools.version }, 'tools mount ready');
  return tools;
}
