// Whether a sandbox that mounts volumes may leave its node (docs/cluster.md#volumes-in-a-cluster): with node-affine
// volumes (`[volume].storage = "node"`) it may not — no other node has them — so a drain keeps it and a take-over
// elsewhere is refused before anything changes hands; on a shared directory every node mounts every volume.
import { DomainError, ErrorKind } from '@aenv/protocol';
import type { SandboxRecord } from '../orchestrator/types.js';
import type { VolumeMountRecord } from '../volume/types.js';

/** This node's volumes, as a move of a sandbox sees them. */
export interface NodeVolumes {
  /** Every node of the cluster mounts every volume (`[volume].storage = "shared_dir"`). */
  readonly shared: boolean;
  /** Whether volume `volumeId` is in this node's catalog. */
  has(volumeId: string): Promise<boolean>;
}

const shown = (m: VolumeMountRecord) => JSON.stringify(m.name);

/**
 * Why the sandbox must stay on this node (a drain keeps it paused here), or undefined when it may move: it
 * mounts a volume only this node has. Without `volumes` (a node that has none) a mounting sandbox stays too.
 */
export function bindingVolume(
  record: Pick<SandboxRecord, 'volumeMounts'>,
  volumes?: NodeVolumes,
): string | undefined {
  const first = record.volumeMounts?.[0];
  if (!first || volumes?.shared) return undefined;
  return `it mounts volume ${shown(first)}, which only this node has (volume.storage = "node"); it stays here paused and resumes here once the node serves again`;
}

/**
 * Before a node takes over a sandbox another node paused (paused-adoption.ts): every volume it mounts must be in
 * this node's catalog, else 503 naming the volume and the node it lives on. Nothing has changed hands yet, so the
 * home node keeps its copy.
 */
export async function assertVolumesHere(
  sandboxId: string,
  mounts: readonly VolumeMountRecord[] | undefined,
  here: { nodeId: string; home: string; volumes?: NodeVolumes | undefined },
): Promise<void> {
  for (const m of mounts ?? []) {
    if (here.volumes && (await here.volumes.has(m.volumeId))) continue;
    throw new DomainError(
      ErrorKind.Unavailable,
      `sandbox ${sandboxId} mounts volume ${shown(m)}, which is not on node ${here.nodeId}: it resumes only on node ${here.home}, which holds the volume; try again once that node serves it`,
      { expose: true, details: { sandboxId, node: here.home, volumeID: m.volumeId } },
    );
  }
}
