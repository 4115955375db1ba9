import { CONFIG_FIELDS } from './load.js';
import { getIn, setIn } from './walk.js';
import type { AenvConfig } from './types.js';

/** A plain copy of the configuration that is safe to log: secret values become "<redacted>". */
export function redactConfig(config: AenvConfig): Record<string, unknown> {
  const copy = structuredClone(config) as unknown as Record<string, unknown>;
  for (const f of CONFIG_FIELDS) {
    if (f.field.secret && getIn(copy, f.path) !== undefined) setIn(copy, f.path, '<redacted>');
  }
  return copy;
}
