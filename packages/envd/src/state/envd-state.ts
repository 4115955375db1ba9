import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Logger } from '../logger.js';

/** What POST /init sets; persisted so a restarted envd (aenv-init restarts it) keeps its token and env. */
export interface InitData {
  envVars: Record<string, string>;
  accessToken?: string;
  defaultUser?: string;
  defaultWorkdir?: string;
  timestamp?: string;
  /** aenv extensions: the server may pass the ids here instead of through envd's environment. */
  sandboxId?: string;
  templateId?: string;
  /** aenv: the node's credential for the next /init (docs/security.md, "envd /init"). */
  initKey?: string;
  /** aenv: limits on signed /files URLs (see auth/access.ts SignatureLimits). */
  signatureMaxLifetimeSecs?: number;
  unexpiringSignaturesUntil?: number;
}

const STRING_FIELDS = [
  'accessToken',
  'defaultUser',
  'defaultWorkdir',
  'timestamp',
  'sandboxId',
  'templateId',
  'initKey',
] as const;
const COUNT_FIELDS = ['signatureMaxLifetimeSecs', 'unexpiringSignaturesUntil'] as const;

export interface EnvdStateOptions {
  /** File the init data is persisted to (mode 0600); undefined = memory only. */
  statePath?: string;
  /** E2B_SANDBOX_ID / E2B_TEMPLATE_ID as given to envd by the runtime. */
  sandboxId?: string;
  templateId?: string;
  /** AENV_ENVD_INIT_KEY as given by the runtime at boot: required by /init until /init replaces it. */
  bootInitKey?: string;
  logger: Logger;
}

export class EnvdState {
  private data: InitData = { envVars: {} };

  constructor(private readonly opts: EnvdStateOptions) {
    if (opts.statePath) {
      try {
        this.data = validateInitBody(JSON.parse(readFileSync(opts.statePath, 'utf8')));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
          opts.logger.warn('ignoring unreadable envd state', { err });
      }
    }
  }

  get accessToken(): string | undefined {
    return this.data.accessToken || undefined;
  }

  /**
   * The node credentials /init accepts in X-Aenv-Init-Key: the one the last /init set and the one this envd
   * was booted with (a fresh boot on a saved disk reads its source's state file). Empty = /init is open (an
   * envd restored from a capture made before init keys existed, or started without one).
   */
  get initKeys(): string[] {
    return [this.data.initKey, this.opts.bootInitKey].filter((k): k is string => !!k);
  }

  get signatureLimits(): { maxLifetimeSecs?: number; unexpiringUntil?: number } | undefined {
    const { signatureMaxLifetimeSecs: max, unexpiringSignaturesUntil: until } = this.data;
    if (max === undefined && until === undefined) return undefined;
    return {
      ...(max !== undefined ? { maxLifetimeSecs: max } : {}),
      ...(until !== undefined ? { unexpiringUntil: until } : {}),
    };
  }

  get defaultUser(): string {
    return this.data.defaultUser || 'root';
  }

  get defaultWorkdir(): string | undefined {
    return this.data.defaultWorkdir || undefined;
  }

  /** The environment every process gets before its own `envs`. */
  globalEnv(): Record<string, string> {
    const env: Record<string, string> = { ...this.data.envVars, E2B_SANDBOX: 'true' };
    const sandboxId = this.data.sandboxId ?? this.opts.sandboxId;
    const templateId = this.data.templateId ?? this.opts.templateId;
    if (sandboxId) env.E2B_SANDBOX_ID = sandboxId;
    if (templateId) env.E2B_TEMPLATE_ID = templateId;
    return env;
  }

  /** Applies /init: env vars merge into the existing ones, other fields replace when present. */
  applyInit(body: InitData): void {
    const next: InitData = { ...this.data, envVars: { ...this.data.envVars, ...body.envVars } };
    for (const key of STRING_FIELDS) {
      if (body[key] !== undefined) next[key] = body[key];
    }
    for (const key of COUNT_FIELDS) {
      if (body[key] !== undefined) next[key] = body[key];
    }
    this.data = next;
    this.persist();
  }

  private persist(): void {
    const path = this.opts.statePath;
    if (!path) return;
    const tmp = `${path}.${process.pid}.tmp`;
    try {
      mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
      writeFileSync(tmp, JSON.stringify(this.data), { mode: 0o600 });
      renameSync(tmp, path);
    } catch (err) {
      // A full disk: the state stays in memory; the last complete file stays as it was.
      rmSync(tmp, { force: true });
      this.opts.logger.warn('could not persist envd state', { err, path });
    }
  }
}

export class InitBodyError extends Error {}

/** Checks the JSON of POST /init; unknown fields (volumeMounts, hyperloopIP, …) are ignored. */
export function validateInitBody(raw: unknown): InitData {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new InitBodyError('body must be a JSON object');
  const body = raw as Record<string, unknown>;
  const out: InitData = { envVars: {} };
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
  for (const key of STRING_FIELDS) {
    const v = body[key];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'string') throw new InitBodyError(`${key} must be a string`);
    out[key] = v;
  }
  for (const key of COUNT_FIELDS) {
    const v = body[key];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
      throw new InitBodyError(`${key} must be a non-negative integer`);
    out[key] = v;
  }
  return out;
}
