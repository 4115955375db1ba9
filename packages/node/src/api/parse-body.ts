// Request bodies are checked against the E2B schemas of @aenv/protocol; a bad one is the client's 400.
import type { z } from 'zod';
import { ApiError } from './errors.js';

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
