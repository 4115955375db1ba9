import { DomainError, ErrorKind } from '@aenv/protocol';

/** The env var a start-fresh hook's `extraBootArgs` become in container mode (docs/hooks.md). */
export const EXTRA_BOOT_ARGS_ENV = 'AENV_EXTRA_BOOT_ARGS';
/** Largest custom extension params (as JSON) a caller or the extension may store with a sandbox. */
export const MAX_PARAMS_BYTES = 64 * 1024;

/**
 * Checks params an API caller sent (`customExtensionParams` of a create, the body of a PATCH): a JSON object whose
 * encoding is at most MAX_PARAMS_BYTES. `what` names the field in the 400.
 */
export function checkParams(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new DomainError(ErrorKind.InvalidArgument, `${what} must be a JSON object`);
  }
  let size: number;
  try {
    size = Buffer.byteLength(JSON.stringify(value));
  } catch {
    throw new DomainError(ErrorKind.InvalidArgument, `${what} cannot be encoded as JSON`);
  }
  if (size > MAX_PARAMS_BYTES) {
    throw new DomainError(
      ErrorKind.InvalidArgument,
      `${what} is ${size} bytes as JSON; at most ${MAX_PARAMS_BYTES} are allowed`,
    );
  }
  return value as Record<string, unknown>;
}
