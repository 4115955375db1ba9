// What a sandbox launched from a committed template needs besides its base image, for the backend's start():
// the template's disk layers as extra overlay lower dirs, its environment for envd's /init, and — for templates
// captured without memory — its start command, started again in the new sandbox.
import type { CommittedSnapshot, SnapshotRecord } from '../snapshot/index.js';
import type { Logger } from '../util/log.js';
import { EnvdRpcClient } from '../envd/rpc-client.js';
import type { TemplateLayerStore } from './layer-store.js';
import { runStartup } from './startup.js';

/** True when launches must run the template's start command themselves (its processes were not captured). */
export function needsStartupRun(committed: CommittedSnapshot): boolean {
  return Boolean(committed.startup?.startCmd) && !committed.artifacts.memory;
}

/** Lower dirs of the template's own layers (above the image's), bottom first; [] for plain image templates. */
export async function templateLowerDirs(
  record: SnapshotRecord,
  layers: TemplateLayerStore,
): Promise<string[]> {
  const committed = record.committed;
  if (!committed || committed.layers.length === 0) return [];
  return layers.lowerDirs(committed.layers);
}

export interface LaunchStartupOptions {
  /** `http://<hostInteractionIp>:<envd port>` */
  envdUrl: string;
  accessToken?: string;
  committed: CommittedSnapshot;
  logger: Logger;
  /** Wait for the ready command (polled every `readyIntervalMs`) before returning; default true. */
  waitReady?: boolean;
  readyIntervalMs?: number;
  readyTimeoutMs?: number;
}

/**
 * Starts the template's start command in a freshly started sandbox (after envd's /init) and, when the template
 * has a ready command, waits until it succeeds, so that the sandbox is as ready as the template was when it was
 * captured. The process is left running; its output is not followed.
 */
export async function startTemplateStartup(o: LaunchStartupOptions): Promise<void> {
  const startup = o.committed.startup;
  if (!startup?.startCmd) return;
  const envd = new EnvdRpcClient({
    baseUrl: o.envdUrl,
    ...(o.accessToken ? { accessToken: o.accessToken } : {}),
  });
  const shell = (await envd.stat('/bin/bash')) ? '/bin/bash' : '/bin/sh';
  const wait = o.waitReady !== false && Boolean(startup.readyCmd);
  const proc = await runStartup({
    envd,
    shell,
    startup: {
      startCmd: startup.startCmd,
      ...(wait ? { readyCmd: startup.readyCmd } : {}),
      context: startup.context,
    },
    defaultReadyMs: 0,
    readyIntervalMs: o.readyIntervalMs ?? 100,
    readyTimeoutMs: o.readyTimeoutMs ?? 60_000,
  });
  proc?.detach();
  o.logger.debug({ pid: proc?.pid }, 'template start command started');
}
