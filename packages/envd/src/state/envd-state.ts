import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { INIT_COUNT_FIELDS, INIT_STRING_FIELDS, validateInitBody, type InitBody } from '@aenv/protocol/envd';
import type { Logger } from '../logger.js';

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
  /** What the last /init set (persisted, so a restarted envd keeps its token and env; aenv-init restarts it). */
  private data: InitBody = { envVars: {} };
  /**
   * Accepted until an /init sets a key of its own. Every sandbox restored from one checkpoint (a template's or
   * start capture, a fork) holds the same boot key: once the node has given it its own, the shared one opens
   * nothing (docs/security.md).
   */
  private bootInitKey: string | undefined;

  constructor(private readonly opts: EnvdStateOptions) {
    this.bootInitKey = opts.bootInitKey;
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
   * was booted with, until an /init sets one (a fresh boot on a saved disk reads its source's state file).
   * Empty = /init is open (an envd restored from a capture made before init keys existed, or started without one).
   */
  get initKeys(): string[] {
    return [this.data.initKey, this.bootInitKey].filter((k): k is string => !!k);
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
  applyInit(body: InitBody): void {
    const next: InitBody = { ...this.data, envVars: { ...this.data.envVars, ...body.envVars } };
    for (const key of INIT_STRING_FIELDS) {
      if (body[key] !== undefined) next[key] = body[key];
    }
    for (const key of INIT_COUNT_FIELDS) {
      if (body[key] !== undefined) next[key] = body[key];
    }
    this.data = next;
    if (body.initKey) this.bootInitKey = undefined;
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
