// Attached drives on the backend's side (docs/volumes.md "Attached drives"): what a cold start hands over, the
// drives' image leases, and their layers found again wherever a sandbox is launched or resumed.
import type { ImageService, PulledImage } from '../image/index.js';
import type { DriveSpec } from '../runtime/driver.js';

/** A drive without its layer dirs: what a cold launchable carries (`committed.extra[COLD_DRIVES_KEY]`). */
export type ColdDrive = Omit<DriveSpec, 'layers'>;
export const COLD_DRIVES_KEY = 'attachedDrives';

/** Who holds the image lease of a sandbox's `n`th drive: its rootfs lease holder (`sandbox:<id>`), extended. */
export const driveLeaseHolder = (holder: string, n: number) => `${holder}:drive:${n}`;

/** The drives of a cold launchable's committed record (none when it has none). */
export function coldDrivesOf(extra: Record<string, unknown> | undefined): ColdDrive[] {
  const drives = extra?.[COLD_DRIVES_KEY];
  return Array.isArray(drives) ? (drives as ColdDrive[]) : [];
}

/** The drives with the layer dirs of their exact images (pulled again when no longer cached). */
export async function withLayers(
  drives: readonly ColdDrive[],
  imageFor: (reference: string, manifestDigest: string) => Promise<PulledImage>,
): Promise<DriveSpec[]> {
  return Promise.all(
    drives.map(async (d) => {
      const image = await imageFor(d.image.reference, d.image.manifestDigest);
      return { ...d, layers: image.layers.map((l) => l.dir) };
    }),
  );
}

type Leases = Pick<ImageService, 'acquireLease' | 'releaseLease' | 'listLeases'>;

/** Pins each drive's image for `holder` (the sandbox's rootfs lease holder). */
export function leaseDrives(images: Leases, holder: string, drives: readonly DriveSpec[]): void {
  drives.forEach((d, n) => images.acquireLease(driveLeaseHolder(holder, n), d.image.manifestDigest));
}

/** Lets go of every drive lease of `holder`. */
export function releaseDriveLeases(images: Leases, holder: string): void {
  const prefix = driveLeaseHolder(holder, 0).slice(0, -1);
  for (const l of images.listLeases()) if (l.holder.startsWith(prefix)) images.releaseLease(l.holder);
}
