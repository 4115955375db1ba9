// The body of envd's `POST /init` (E2B's fields plus aenv's extensions), defined once for both ends: the node
// builds it, envd validates it with `validateInitBody` (and re-reads its persisted copy with it).

/** What POST /init sets. Unknown fields (volumeMounts, hyperloopIP, …) are ignored. */
export interface InitBody {
  envVars: Record<string, string>;
  /** The sandbox's token, or '' to clear one a restored envd still holds. */
  accessToken?: string;
  defaultUser?: string;
  defaultWorkdir?: string;
  timestamp?: string;
  /** aenv: identity of the sandbox (a fork or snapshot launch changes it); else envd's E2B_* environment. */
  sandboxId?: string;
  templateId?: string;
  /** aenv: the init key envd requires from the next /init on (docs/security.md, "envd /init"). */
  initKey?: string;
  /** aenv: signed /files URLs expiring further than this many seconds ahead are refused. */
  signatureMaxLifetimeSecs?: number;
  /** aenv: signed /files URLs without expiration are refused after this unix time. */
  unexpiringSignaturesUntil?: number;
}

/** The string fields of InitBody besides envVars. */
export const INIT_STRING_FIELDS = [
  'accessToken',
  'defaultUser',
  'defaultWorkdir',
  'timestamp',
  'sandboxId',
  'templateId',
  'initKey',
] as const;

/** The non-negative integer fields of InitBody. */
export const INIT_COUNT_FIELDS = ['signatureMaxLifetimeSecs', 'unexpiringSignaturesUntil'] as const;

export class InitBodyError extends Error {}

/** Checks the JSON of POST /init; unknown fields are dropped, null means absent. Throws InitBodyError. */
export function validateInitBody(raw: unknown): InitBody {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new InitBodyError('body must be a JSON object');
  const body = raw as Record<string, unknown>;
  const out: InitBody = { envVars: {} };
  if (body.envVars !== undefined && body.envVars !== null) {
    if (typeof body.envVars !== 'object' || Array.isArray(body.envVars))
      throw new InitBodyError('envVars must be an object');
    for (const [k, v] of Object.entries(body.envVars as Record<string, unknown>)) {
      if (typeof v !== 'string') throw new InitBodyError(`envVars.${k} must be a string`);
      if (!k || k.includes('=') || k.includes('\0') || v.includes('\0'))
        throw new InitBodyError(`invalid env var '${k}'`);
      out.envVars[k] = v;
    }
  }
  for (const key of INIT_STRING_FIELDS) {
    const v = body[key];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'string') throw new InitBodyError(`${key} must be a string`);
    out[key] = v;
  }
  for (const key of INIT_COUNT_FIELDS) {
    const v = body[key];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
      throw new InitBodyError(`${key} must be a non-negative integer`);
    out[key] = v;
  }
  return out;
}
