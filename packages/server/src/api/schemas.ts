import { z } from 'zod';
import { ApiError } from './errors.js';

const stringMap = z.record(z.string(), z.string());
const int32 = z.number().int().min(0).max(2_147_483_647);

export const networkConfigSchema = z.object({
  allowPublicTraffic: z.boolean().optional(),
  allowOut: z.array(z.string()).optional(),
  denyOut: z.array(z.string()).optional(),
});

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
});

export const timeoutSchema = z.object({ timeout: int32 });
export const connectSchema = z.object({ timeout: int32, memory: z.boolean().optional() });
export const resumeSchema = z.object({
  timeout: int32.optional(),
  memory: z.boolean().optional(),
  autoPause: z.boolean().optional(),
});
export const connectV2Schema = z.object({ timeout: int32.optional(), memory: z.boolean().optional() });
export const refreshSchema = z.object({ duration: z.number().int().min(0).max(3600).optional() });
export const networkUpdateSchema = z.object({
  allowOut: z.array(z.string()).optional(),
  denyOut: z.array(z.string()).optional(),
  allow_internet_access: z.boolean().optional(),
});
export const forkSchema = z.object({
  count: z.number().int().min(1).max(100).optional(),
  timeout: int32.optional(),
});
export const snapshotSchema = z.object({ name: z.string().optional() });
export const pauseSchema = z.object({
  memory: z.boolean().optional(),
  requireHealthyGuest: z.boolean().optional(),
});

/** Parses a request body; a bad body is a 400 naming the first offending field. */
export function parseBody<T>(schema: z.ZodType<T>, body: unknown, what: string): T {
  const result = schema.safeParse(body ?? {});
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const where = issue.path.length ? issue.path.join('.') : 'body';
  throw new ApiError(400, `invalid ${what}: ${where}: ${issue.message}`);
}

/** Like parseBody, but the body itself is required. */
export function parseRequiredBody<T>(schema: z.ZodType<T>, body: unknown, what: string): T {
  if (body === undefined || body === null)
    throw new ApiError(400, `invalid ${what}: a JSON body is required`);
  return parseBody(schema, body, what);
}
