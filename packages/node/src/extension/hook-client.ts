import { DomainError, ErrorKind } from '@aenv/protocol';
import { fetch } from 'undici';
import type { Logger } from '../util/log.js';

/** Largest answer a hook may send (docs/hooks.md); a longer one fails the call. */
export const MAX_HOOK_RESPONSE_BYTES = 256 * 1024;
/** Longest `extraBootArgs` a start-fresh answer may carry. */
export const MAX_EXTRA_BOOT_ARGS = 4096;

export type HookName = 'start-fresh' | 'start-resume' | 'patch-params' | 'stop';

/** Body of `start-fresh` and `start-resume` (docs/hooks.md). */
export interface StartHookBody {
  sandboxId: string;
  sandboxInstanceId: string;
  networkNamespacePath: string;
  hostInteractionIp: string;
  customExtensionParams?: Record<string, unknown>;
}

/** A hook that failed (connection, timeout, non-2xx, malformed answer): the operation it was part of fails. */
export class HookError extends DomainError {
  constructor(
    readonly hook: HookName,
    reason: string,
    kind: ErrorKind = ErrorKind.BadUpstream,
  ) {
    // The reason names the extension's failure, never a host path: the caller may read it (docs/hooks.md).
    super(kind, `custom extension hook ${hook} failed: ${reason}`, { expose: true });
    this.name = 'HookError';
  }
}

export interface HookClientOptions {
  /** `[custom_extension].url` (config only: API callers never choose where hooks go). */
  url: string;
  /** `[custom_extension].timeout_ms`: bound of each call, answer included. */
  timeoutMs: number;
  logger: Logger;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Calls the custom extension's lifecycle hooks, `POST {url}/sandbox-hook/<name>` (docs/hooks.md). Every call is
 * bounded by `timeoutMs` and its answer by MAX_HOOK_RESPONSE_BYTES; `stop` is best effort and never throws.
 */
export class HookClient {
  private readonly base: string;
  private readonly stopping = new Set<Promise<void>>();

  constructor(private readonly opts: HookClientOptions) {
    this.base = opts.url.replace(/\/+$/, '');
  }

  /** Returns the extra boot args the extension asks for (undefined: none). */
  async startFresh(body: StartHookBody): Promise<string | undefined> {
    const answer = await this.call('start-fresh', body);
    if (answer === undefined) return undefined;
    if (!isObject(answer)) throw new HookError('start-fresh', 'the answer is not a JSON object');
    const args = answer.extraBootArgs;
    if (args === undefined || args === null || args === '') return undefined;
    if (typeof args !== 'string') throw new HookError('start-fresh', 'extraBootArgs is not a string');
    if (args.length > MAX_EXTRA_BOOT_ARGS || /[\0\n\r]/.test(args)) {
      throw new HookError(
        'start-fresh',
        `extraBootArgs must be one line of at most ${MAX_EXTRA_BOOT_ARGS} characters`,
      );
    }
    return args;
  }

  async startResume(body: StartHookBody): Promise<void> {
    await this.call('start-resume', body, { ignoreBody: true });
  }

  /** Returns the sandbox's full new params, as the extension computed them from `patch`. */
  async patchParams(sandboxId: string, patch: Record<string, unknown>): Promise<Record<string, unknown>> {
    // A failed patch is a 400, as the reference answers it (docs/hooks.md#failures).
    const answer = await this.call('patch-params', { sandboxId, patch }, { kind: ErrorKind.InvalidArgument });
    if (!isObject(answer) || !isObject(answer.customExtensionParams)) {
      throw new HookError(
        'patch-params',
        'the answer has no customExtensionParams object',
        ErrorKind.InvalidArgument,
      );
    }
    return answer.customExtensionParams;
  }

  /** Best effort: tells the extension the instance stopped; failures are only logged. */
  stop(sandboxId: string, sandboxInstanceId: string): void {
    const sent: Promise<void> = this.call('stop', { sandboxId, sandboxInstanceId }, { ignoreBody: true })
      .then(() => {})
      .catch((err: unknown) =>
        this.opts.logger.warn({ err, sandboxId, sandboxInstanceId }, 'custom extension stop hook failed'),
      )
      .finally(() => this.stopping.delete(sent));
    this.stopping.add(sent);
  }

  /** Waits for the stop calls in flight (each bounded by the timeout); used at shutdown. */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.stopping]);
  }

  private async call(
    hook: HookName,
    body: unknown,
    opts: { ignoreBody?: boolean; kind?: ErrorKind } = {},
  ): Promise<unknown> {
    const fail = (reason: string) => new HookError(hook, reason, opts.kind);
    const signal = AbortSignal.timeout(this.opts.timeoutMs);
    let text: string;
    try {
      const res = await fetch(`${this.base}/sandbox-hook/${hook}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify(body),
        redirect: 'error',
        signal,
      });
      if (res.status < 200 || res.status > 299) {
        await res.body?.cancel().catch(() => {});
        throw fail(`the extension answered HTTP ${res.status}`);
      }
      if (opts.ignoreBody) {
        await res.body?.cancel().catch(() => {});
        return undefined;
      }
      text = await readBounded(res.body, hook, opts.kind);
    } catch (err) {
      if (err instanceof HookError) throw err;
      if (signal.aborted) throw fail(`no answer within ${this.opts.timeoutMs} ms (timeout_ms)`);
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw fail(
        `could not reach the extension (${cause?.code ?? cause?.message ?? (err as Error).message})`,
      );
    }
    if (text.trim() === '') return undefined;
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw fail('the answer is not valid JSON');
    }
  }
}

async function readBounded(
  body: AsyncIterable<Uint8Array> | null,
  hook: HookName,
  kind?: ErrorKind,
): Promise<string> {
  if (!body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.byteLength;
    if (size > MAX_HOOK_RESPONSE_BYTES) {
      throw new HookError(hook, `the answer is larger than ${MAX_HOOK_RESPONSE_BYTES} bytes`, kind);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
