import { readFileSync } from 'node:fs';
import { hostname as osHostname } from 'node:os';
import { isUuid, NIL_UUID, uuidv7 } from '@aenv/protocol';
import { readMachineInfo, type MachineInfo } from './machine-info.js';

/** `[node_identity]` as loaded by @aenv/config (AENV_NODE_ID, AENV_CLUSTER_ID, AENV_SERVICE_INSTANCE_ID already applied). */
export interface NodeIdentitySettings {
  readonly node_id?: string;
  readonly cluster_id?: string;
  readonly service_instance_id?: string;
}

/** Who this node is, for /nodes and scheduler heartbeats (docs/differences.md). */
export interface NodeIdentity {
  nodeId: string;
  clusterId: string;
  serviceInstanceId: string;
  version: string;
  commit: string;
  machineInfo: MachineInfo;
}

export interface ResolveNodeIdentityOptions {
  /** Host name used when node_id is unset; default: see systemHostname(). */
  hostname?: () => string;
  /** Source of the per-start service instance id; default a new UUIDv7. */
  newServiceInstanceId?: () => string;
  /** Default: the version of @aenv/node. */
  version?: string;
  /** Build commit; default "unknown" (never taken from the runtime environment). */
  commit?: string;
  /** Default: read from /proc/cpuinfo. */
  machineInfo?: MachineInfo;
}

/**
 * Fills in the identity defaults: node id = host name, service instance id = a fresh UUIDv7
 * (so every start is distinguishable), cluster id = nil UUID when unset or not a UUID (with a
 * warning; the config loader normally did this already).
 */
export function resolveNodeIdentity(
  settings: NodeIdentitySettings,
  opts: ResolveNodeIdentityOptions = {},
): { identity: NodeIdentity; warnings: string[] } {
  const warnings: string[] = [];
  const nodeId = nonBlank(settings.node_id) ?? (opts.hostname ?? systemHostname)();
  const serviceInstanceId = nonBlank(settings.service_instance_id) ?? (opts.newServiceInstanceId ?? uuidv7)();
  let clusterId = NIL_UUID;
  const rawCluster = nonBlank(settings.cluster_id);
  if (rawCluster !== undefined) {
    if (isUuid(rawCluster)) clusterId = rawCluster.toLowerCase();
    else
      warnings.push(
        `node_identity.cluster_id = ${JSON.stringify(rawCluster)} is not a UUID; using the nil UUID ${NIL_UUID}`,
      );
  }
  return {
    identity: {
      nodeId,
      clusterId,
      serviceInstanceId,
      version: opts.version ?? serverVersion(),
      commit: opts.commit ?? 'unknown',
      machineInfo: opts.machineInfo ?? readMachineInfo(),
    },
    warnings,
  };
}

/**
 * The host name as the reference finds it: `$HOSTNAME`, then /proc/sys/kernel/hostname, then
 * /etc/hostname, then the OS call; "unknown" if all are empty.
 */
export function systemHostname(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = nonBlank(env.HOSTNAME);
  if (fromEnv) return fromEnv;
  for (const file of ['/proc/sys/kernel/hostname', '/etc/hostname']) {
    try {
      const name = nonBlank(readFileSync(file, 'utf8'));
      if (name) return name;
    } catch {
      // Try the next source.
    }
  }
  return nonBlank(osHostname()) ?? 'unknown';
}

/** The version of @aenv/node (its package.json, found from src/ and dist/ alike). */
export function serverVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version?: unknown;
    };
    return typeof pkg.version === 'string' ? pkg.version : 'unknown';
  } catch {
    return 'unknown';
  }
}

function nonBlank(v: string | undefined): string | undefined {
  const t = v?.trim();
  return t ? t : undefined;
}
