// What `POST /sandboxes-cold` starts from: an OCI image pulled through the node's image service (its resolver
// rules, registries and cache, as a template's fromImage), described as a launchable template that exists only
// for this one create — nothing is stored in the template repository (docs/differences.md).
import { lstat } from 'node:fs/promises';
import { join } from 'node:path';
import type { LaunchableTemplate } from '../orchestrator/orchestrator.js';
import type { ImageService } from '../image/image-service.js';
import type { CommittedSnapshot } from '../snapshot/index.js';
import { DomainError, ErrorKind } from '@aenv/protocol';
import { defaultUserOf, envOf } from '../backend/image-defaults.js';
import { COLD_DRIVES_KEY, type ColdDrive } from '../backend/drives.js';
import { isImageError, shownValue } from '../image/errors.js';

export interface ColdImageOptions {
  images: Pick<ImageService, 'pull'>;
  runtimeVersions: Record<string, string>;
  virtualizationMode: string;
  envdVersion: string;
}

export type ColdResources = LaunchableTemplate['resources'];

const GIB_MB = 1024;

/** An attached drive of a cold start, as the API checked it (docs/volumes.md "Attached drives"). */
export interface ColdDriveRequest {
  driveID: string;
  readOnly: boolean;
  mountPath: string;
  subPath?: string;
  diskSizeMB?: number;
  image: string;
}

/**
 * The reference's default disk of a cold start: the image's size — here its unpacked layers — in MiB, rounded up
 * to the 1024 MiB steps a requested diskSizeMB must take (at least 1024).
 */
export function imageDiskSizeMB(layers: readonly { size: number }[]): number {
  const mb = layers.reduce((sum, l) => sum + l.size, 0) / 1024 ** 2;
  return Math.max(GIB_MB, Math.ceil(mb / GIB_MB) * GIB_MB);
}

/**
 * Pulls `ref` (or finds it in the cache) and describes a fresh boot on it with `resources`; a `diskSizeMB` left
 * out is the image's size.
 */
export async function coldLaunchable(
  o: ColdImageOptions,
  ref: string,
  requested: Omit<ColdResources, 'diskSizeMB'> & { diskSizeMB?: number },
  driveRequests: readonly ColdDriveRequest[] = [],
): Promise<LaunchableTemplate> {
  const image = await pullFor(o, ref, 'sandbox rootfs image');
  const drives = await Promise.all(driveRequests.map((d) => coldDrive(o, d)));
  const resources: ColdResources = {
    ...requested,
    diskSizeMB: requested.diskSizeMB ?? imageDiskSizeMB(image.layers),
  };
  const workdir = image.config.workingDir || '/';
  const user = defaultUserOf(image);
  const committed: CommittedSnapshot = {
    context: {
      envVars: envOf(image),
      workdir,
      user,
      exposedPorts: image.config.exposedPorts,
      ...(image.config.entrypoint ? { entrypoint: image.config.entrypoint } : {}),
      ...(image.config.cmd ? { cmd: image.config.cmd } : {}),
      volumes: image.config.volumes,
      labels: image.config.labels,
    },
    runtimeVersions: o.runtimeVersions,
    virtualizationMode: o.virtualizationMode,
    baseImage: { reference: image.reference, manifestDigest: image.manifestDigest },
    layers: [],
    artifacts: {},
    ...(drives.length ? { extra: { [COLD_DRIVES_KEY]: drives } } : {}),
  };
  return {
    // The reference reports the resolved image reference as a cold sandbox's templateID.
    templateId: image.reference,
    record: { committed },
    cold: true,
    resources,
    envdVersion: o.envdVersion,
    defaultUser: user,
    envVars: committed.context.envVars,
    ...(workdir !== '/' ? { defaultWorkdir: workdir } : {}),
  };
}

/**
 * The reference's answers: an image the caller got wrong (invalid, not allowed, unknown, unauthorized) is a 400;
 * anything else keeps its kind (a 5xx whose details only the log shows, docs/security.md "Error answers").
 */
async function pullFor(o: ColdImageOptions, ref: string, kind: string) {
  try {
    return await o.images.pull(ref);
  } catch (e) {
    const what = `resolve ${kind} '${shownValue(ref).slice(1, -1)}'`;
    const message = `${what}: ${e instanceof Error ? e.message : String(e)}`;
    if (isImageError(e) && e.userError)
      throw new DomainError(ErrorKind.InvalidArgument, message, { cause: e });
    throw new DomainError(isImageError(e) ? e.kind : ErrorKind.Internal, message, { cause: e });
  }
}

/** Pulls a drive's image like the rootfs's; its subPath must be a directory of it (a 400 otherwise). */
async function coldDrive(o: ColdImageOptions, d: ColdDriveRequest): Promise<ColdDrive> {
  const image = await pullFor(o, d.image, `attached drive ${d.driveID} image`);
  if (d.subPath && !(await someLayerHasDir(image.layers, d.subPath)))
    throw new DomainError(
      ErrorKind.InvalidArgument,
      `attached drive ${d.driveID}: subPath ${d.subPath} is not a directory of image ${image.reference}`,
    );
  return {
    id: d.driveID,
    image: { reference: image.reference, manifestDigest: image.manifestDigest },
    mountPath: d.mountPath,
    ...(d.subPath ? { subPath: d.subPath } : {}),
    readOnly: d.readOnly,
    // As the rootfs: left out, the image's size.
    ...(d.readOnly ? {} : { sizeMB: d.diskSizeMB ?? imageDiskSizeMB(image.layers) }),
  };
}

/** Whether a layer has `rel` as a directory reached through directories only (no symlinks on the way). */
async function someLayerHasDir(layers: readonly { dir: string }[], rel: string): Promise<boolean> {
  for (const l of [...layers].reverse()) {
    let at = l.dir;
    let ok = true;
    for (const part of rel.split('/')) {
      at = join(at, part);
      const st = await lstat(at).catch(() => undefined);
      if (!st?.isDirectory()) {
        ok = false;
        break;
      }
    }
    if (ok) return true;
  }
  return false;
}
