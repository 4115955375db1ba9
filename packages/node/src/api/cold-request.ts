// `NewColdSandbox` (`POST /sandboxes-cold`): the body's types are the protocol schema's; its resource bounds
// and the fields aenv cannot honour are checked here, with the reference's messages (docs/api.md).
import { newColdSandboxSchema, type NewColdSandbox } from '@aenv/protocol';
import { ApiError } from './errors.js';
import { parseRequiredBody } from './parse-body.js';
import { refuseUnsupportedCreateFields } from './unsupported-fields.js';
import { parseAttachedDrives, type AttachedDriveRequest } from './attached-drives.js';

export interface ColdDefaults {
  /** `[machine].vcpu_count` */
  cpuCount: number;
  /** `[machine].mem_size_mib` */
  memoryMB: number;
}

export interface ColdRequest {
  body: NewColdSandbox;
  /** `diskSizeMB` only when the request names it: left out, it is the image's size (template/cold-image.ts). */
  resources: { cpuCount: number; memoryMB: number; diskSizeMB?: number };
  /** `attachedDrives`, checked, with the reference's defaults (docs/volumes.md "Attached drives"). */
  drives: AttachedDriveRequest[];
}

/** Parses and checks a cold start request; every refusal is a 400 naming the field. */
export function parseColdRequest(
  raw: unknown,
  defaults: ColdDefaults,
  opts: { volumes?: boolean } = {},
): ColdRequest {
  const body = parseRequiredBody(newColdSandboxSchema, raw, 'cold sandbox request');
  refuseUnsupportedCreateFields(raw, opts);
  const cpuCount = body.cpuCount ?? defaults.cpuCount;
  if (cpuCount <= 0) throw new ApiError(400, 'cpuCount must be greater than 0');
  const memoryMB = body.memoryMB ?? defaults.memoryMB;
  if (memoryMB < 128) throw new ApiError(400, 'memoryMB must be at least 128');
  if (body.diskSizeMB !== undefined && (body.diskSizeMB < 1024 || body.diskSizeMB % 1024 !== 0))
    throw new ApiError(400, 'diskSizeMB must be at least 1024 and divisible by 1024');
  const drives = parseAttachedDrives(
    body.attachedDrives,
    (body.volumeMounts ?? []).map((m) => m.path.replace(/\/+$/, '') || '/'),
  );
  // A microVM appends them to its kernel command line; a container has no kernel of its own.
  if (body.extraBootArgs)
    throw new ApiError(
      400,
      'extraBootArgs is not supported by this server (container sandboxes have no kernel command line); leave it out',
    );
  return {
    body,
    drives,
    resources: {
      cpuCount,
      memoryMB,
      ...(body.diskSizeMB !== undefined ? { diskSizeMB: body.diskSizeMB } : {}),
    },
  };
}
