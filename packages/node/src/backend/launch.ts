// Bringing a sandbox up from saved state in a fresh slot: a snapshot or template capture, a fork child's share of
// one checkpoint, a paused sandbox whose container is gone. Memory is restored when there is some (falling back to
// a boot on the saved disk when the restore fails), else the saved disk boots.
import { join } from 'node:path';
import type { EgressPolicy } from '../network/types.js';
import type { PulledImage } from '../image/index.js';
import type { BeforeInstanceStart, StartResult } from '../orchestrator/backend.js';
import type { SandboxRecord } from '../orchestrator/types.js';
import type { SnapshotRecord } from '../snapshot/index.js';
import { bindingOf, initBody, leaseHolder, volumesOf, type BackendContext } from './context.js';
import { ensureLocalSnapshot } from './local-snapshots.js';
import type { BackendState } from './record-state.js';
import { withLayers } from './drives.js';

/** Where the saved state is, and whose envd it holds. */
export interface SavedState {
  memory?: string;
  disk: string;
  /** The sandbox whose envd the memory holds (its init key and token are what envd holds). */
  currentId: string;
  currentToken?: string | undefined;
  /** A paused sandbox already holds its image lease, and keeps it if this resume fails. */
  leaseHeld?: boolean;
  /** The runtime's id of the new container (default: the sandbox id); the uid range stays the sandbox's. */
  containerId?: string;
}

export async function launchSaved(
  ctx: BackendContext,
  record: SandboxRecord,
  state: BackendState,
  policy: EgressPolicy,
  from: SavedState,
  beforeStart?: BeforeInstanceStart,
): Promise<StartResult> {
  const o = ctx.o;
  const containerId = from.containerId ?? record.id;
  const launched = await ctx.factory.assemble({
    containerId,
    ...(containerId !== record.id ? { rangeOwner: record.id, hostname: record.id } : {}),
    templateId: record.templateId,
    resources: record.resources,
    state,
    policy,
    ...(beforeStart ? { placement: { kind: 'resume' as const, hook: beforeStart } } : {}),
    ...(from.leaseHeld ? {} : { leaseHolder: leaseHolder(record.id) }),
    volumes: await volumesOf(ctx, record),
    from: { disk: from.disk, ...(from.memory ? { memory: from.memory } : {}) },
    // envd keeps its token on the sandbox's disk (/run/agentenv), so a fresh boot on a saved disk finds the
    // same token a memory restore does: /init must prove it either way.
    init: ({ restored }) => ({
      body: initBody(ctx, record),
      credentials: {
        initKey: o.envdInitKey(restored ? from.currentId : record.id),
        token: from.currentToken,
      },
    }),
  });
  if (!launched.restored && launched.state.startCmd) {
    ctx.log.warn(
      { sandboxId: record.id, startCmd: launched.state.startCmd },
      'the sandbox booted fresh on its saved disk; its template start command is not running',
    );
  }
  return {
    binding: bindingOf(launched),
    backend: ctx.records.encodeState({
      ...launched.state,
      containerId: containerId === record.id ? undefined : containerId,
      resident: false,
      residentSlot: undefined,
    }),
  };
}

/** The image a sandbox (or capture) was made from, with the exact layers it was made on. */
export async function imageFor(
  ctx: BackendContext,
  reference: string,
  manifestDigest?: string,
): Promise<PulledImage> {
  const cached = manifestDigest ? ctx.o.images.get(manifestDigest) : undefined;
  if (cached) return cached;
  const image = await ctx.o.images.pull(reference);
  if (manifestDigest && image.manifestDigest !== manifestDigest) {
    throw new Error(
      `image ${reference} is now ${image.manifestDigest}; this sandbox was made on ${manifestDigest}, which is no longer cached`,
    );
  }
  return image;
}

/** Launches a sandbox from a capture (snapshot or template): restores its memory, or boots its disk. */
export async function launchCapture(
  ctx: BackendContext,
  record: SandboxRecord,
  snapshot: SnapshotRecord,
  policy: EgressPolicy,
  beforeStart?: BeforeInstanceStart,
): Promise<StartResult> {
  const committed = snapshot.committed!;
  const extra = ctx.records.decodeCapture(snapshot.id, committed.extra);
  const image = await imageFor(ctx, committed.baseImage!.reference, committed.baseImage!.manifestDigest);
  const drives = await withLayers(ctx.records.captureDrives(snapshot.id, committed.extra), (ref, digest) =>
    imageFor(ctx, ref, digest),
  );
  const local = await ensureLocalSnapshot(ctx, snapshot);
  const state: BackendState = {
    imageRef: committed.baseImage!.reference,
    manifestDigest: image.manifestDigest,
    rootfs: { layers: image.layers.map((l) => l.dir), ...(drives.length ? { drives } : {}) },
    toolsVersion: extra.toolsVersion,
    envdEnv: extra.envdEnv,
    ...(committed.startup ? { startCmd: committed.startup.startCmd } : {}),
  };
  const memory = committed.artifacts.memory ? join(local, 'memory') : undefined;
  const currentToken = extra.sourceSecure ? ctx.o.envdToken(extra.sourceSandboxId) : undefined;
  return launchSaved(
    ctx,
    record,
    state,
    policy,
    { memory, disk: join(local, 'disk'), currentId: extra.sourceSandboxId, currentToken },
    beforeStart,
  );
}
