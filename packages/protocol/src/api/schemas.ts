// Request bodies of the E2B control plane as aenv accepts them (the e2b SDK's OpenAPI types,
// `node_modules/e2b/dist/index.d.mts`, `components["schemas"]`). The node validates with these; clients build
// their requests from the inferred types.
import { z } from 'zod';

const stringMap = z.record(z.string(), z.string());
const int32 = z.number().int().min(0).max(2_147_483_647);

/** `SandboxNetworkConfig`. */
export const networkConfigSchema = z.object({
  allowPublicTraffic: z.boolean().optional(),
  allowOut: z.array(z.string()).optional(),
  denyOut: z.array(z.string()).optional(),
  /** `SandboxNetworkRule` lists by domain: checked entry by entry by the node, which names the bad one. */
  rules: z.unknown().optional(),
  /** `SandboxEgressProxyConfig`: checked field by field by the node (network/policy.ts), naming the field. */
  egressProxy: z.unknown().optional(),
  /** Checked by the node (api/ingress-settings.ts), naming the entry. */
  httpsPorts: z.unknown().optional(),
  maskRequestHost: z.unknown().optional(),
});

/** `NewSandbox` / `NewSandboxV2` (`POST /sandboxes`, `POST /v2/sandboxes`). */
export const newSandboxSchema = z.object({
  templateID: z.string().min(1, 'templateID must not be empty'),
  timeout: int32.optional(),
  autoPause: z.boolean().optional(),
  autoPauseMemory: z.boolean().optional(),
  autoResume: z.object({ enabled: z.boolean() }).optional(),
  lifecycle: z
    .object({ onTimeout: z.enum(['pause', 'kill']).optional(), autoResume: z.boolean().optional() })
    .optional(),
  secure: z.boolean().optional(),
  allow_internet_access: z.boolean().optional(),
  network: networkConfigSchema.optional(),
  metadata: stringMap.optional(),
  envVars: stringMap.optional(),
  customExtensionParams: z.record(z.string(), z.unknown()).optional(),
  /** `SandboxVolumeMount[]`: checked further by the node's volume service (docs/volumes.md). */
  volumeMounts: z
    .array(z.object({ name: z.string(), path: z.string() }))
    .max(64)
    .nullish(),
});

/** `AttachedDrive` of `NewColdSandbox` (accepted on the wire; aenv refuses non-empty lists: no volumes yet). */
export const attachedDriveSchema = z.object({
  driveID: z.string(),
  readOnly: z.boolean().optional(),
  mountPath: z.string().optional(),
  subPath: z.string().optional(),
  diskSizeMB: z.number().int().optional(),
  source: z.object({ image: z.string() }),
});

/**
 * `NewColdSandbox` (`POST /sandboxes-cold`, AgentENV): a sandbox booted from an OCI image. `allowInternetAccess` is
 * camelCase here. The resource bounds are checked by the route, with the reference's messages.
 */
export const newColdSandboxSchema = newSandboxSchema
  .omit({ templateID: true, allow_internet_access: true, autoPauseMemory: true, lifecycle: true })
  .extend({
    image: z.string().min(1, 'image must not be empty').max(4096),
    allowInternetAccess: z.boolean().optional(),
    cpuCount: z.number().int().max(2_147_483_647).optional(),
    memoryMB: z.number().int().max(Number.MAX_SAFE_INTEGER).optional(),
    diskSizeMB: z.number().int().max(Number.MAX_SAFE_INTEGER).optional(),
    attachedDrives: z.array(attachedDriveSchema).max(64).optional(),
    extraBootArgs: z.string().max(4096).optional(),
  });

/** `POST /sandboxes/{id}/timeout`. */
export const timeoutSchema = z.object({ timeout: int32 });
/** `ConnectSandbox` (`POST /sandboxes/{id}/connect`). */
export const connectSchema = z.object({ timeout: int32, memory: z.boolean().optional() });
/** `ResumedSandbox` (deprecated `POST /sandboxes/{id}/resume`). */
export const resumeSchema = z.object({
  timeout: int32.optional(),
  memory: z.boolean().optional(),
  autoPause: z.boolean().optional(),
});
/** `ConnectSandboxV2` (`POST /v2/sandboxes/{id}/connect`). */
export const connectV2Schema = z.object({ timeout: int32.optional(), memory: z.boolean().optional() });
/** `SandboxRefreshRequest` (`POST /sandboxes/{id}/refreshes`). */
export const refreshSchema = z.object({ duration: z.number().int().min(0).max(3600).optional() });
/** `SandboxNetworkUpdateConfig` (`PUT /sandboxes/{id}/network`). */
export const networkUpdateSchema = z.object({
  allowOut: z.array(z.string()).optional(),
  denyOut: z.array(z.string()).optional(),
  allow_internet_access: z.boolean().optional(),
  rules: z.unknown().optional(),
  egressProxy: z.unknown().optional(),
});
/** `POST /sandboxes/{id}/fork` (AgentENV). */
export const forkSchema = z.object({
  count: z.number().int().min(1).max(100).optional(),
  timeout: int32.optional(),
});
/** `POST /sandboxes/{id}/snapshots`. */
export const snapshotSchema = z.object({ name: z.string().optional() });
/** `SandboxPauseRequest` (`POST /sandboxes/{id}/pause`). */
export const pauseSchema = z.object({
  memory: z.boolean().optional(),
  requireHealthyGuest: z.boolean().optional(),
});

/** `TemplateBuildRequestV3` (`POST /v3/templates`); fields no route reads pass through. */
export const templateBuildRequestV3Schema = z
  .object({
    name: z.string().optional(),
    alias: z.string().optional(),
    tags: z.array(z.string()).nullable().optional(),
    cpuCount: z.number().int().optional(),
    memoryMB: z.number().int().optional(),
    minFreeDiskMb: z.number().int().optional(),
    teamID: z.string().optional(),
  })
  .passthrough();

/** A step of `TemplateBuildStartV2`. */
export const templateStepSchema = z
  .object({
    type: z.string(),
    args: z.array(z.string()).optional(),
    force: z.boolean().optional(),
    filesHash: z.string().nullable().optional(),
    // The SDK leaves these on COPY steps; they only matter on the client side.
    forceUpload: z.boolean().nullable().optional(),
    resolveSymlinks: z.boolean().nullable().optional(),
    gzip: z.boolean().nullable().optional(),
  })
  .passthrough();

const registrySchema = z.object({ type: z.string() }).passthrough();

/** `TemplateBuildStartV2` (`POST /v2/templates/{templateID}/builds/{buildID}`). */
export const templateBuildStartV2Schema = z
  .object({
    fromImage: z.string().optional(),
    fromTemplate: z.string().optional(),
    fromImageRegistry: registrySchema.optional(),
    force: z.boolean().optional(),
    steps: z.array(templateStepSchema).optional(),
    startCmd: z.string().optional(),
    readyCmd: z.string().optional(),
  })
  .passthrough();

/** `AssignTemplateTagsRequest` (`POST /templates/tags`). */
export const assignTemplateTagsSchema = z
  .object({ target: z.string().min(1), tags: z.array(z.string()).min(1) })
  .strict();
/** `DeleteTemplateTagsRequest` (`DELETE /templates/tags`). */
export const deleteTemplateTagsSchema = z
  .object({ name: z.string().min(1), tags: z.array(z.string()).min(1) })
  .strict();
/** `TemplateUpdateRequest` (`PATCH /templates/{id}`, `PATCH /v2/templates/{id}`). */
export const templateUpdateSchema = z.object({ public: z.boolean().optional() }).strict();

export type NetworkConfig = z.infer<typeof networkConfigSchema>;
export type NewSandbox = z.infer<typeof newSandboxSchema>;
export type NewColdSandbox = z.infer<typeof newColdSandboxSchema>;
export type AttachedDrive = z.infer<typeof attachedDriveSchema>;
export type SetTimeoutRequest = z.infer<typeof timeoutSchema>;
export type ConnectSandbox = z.infer<typeof connectSchema>;
export type ConnectSandboxV2 = z.infer<typeof connectV2Schema>;
export type ResumedSandbox = z.infer<typeof resumeSchema>;
export type RefreshRequest = z.infer<typeof refreshSchema>;
export type NetworkUpdate = z.infer<typeof networkUpdateSchema>;
export type ForkRequest = z.infer<typeof forkSchema>;
export type SnapshotRequest = z.infer<typeof snapshotSchema>;
export type PauseRequest = z.infer<typeof pauseSchema>;
export type TemplateBuildRequestV3 = z.infer<typeof templateBuildRequestV3Schema>;
export type TemplateStep = z.infer<typeof templateStepSchema>;
export type TemplateBuildStartV2 = z.infer<typeof templateBuildStartV2Schema>;
export type AssignTemplateTags = z.infer<typeof assignTemplateTagsSchema>;
export type DeleteTemplateTags = z.infer<typeof deleteTemplateTagsSchema>;
export type TemplateUpdate = z.infer<typeof templateUpdateSchema>;
