import type { AenvConfig } from '@aenv/config';
import type { Logger } from '../util/log.js';
import { HookClient } from './hook-client.js';

/** `[custom_extension]`: the client of the extension's hooks, or none when no URL is configured (docs/hooks.md). */
export function startExtension(
  config: AenvConfig['custom_extension'],
  deps: { logger: Logger },
): HookClient | undefined {
  if (!config.url) return undefined;
  return new HookClient({
    url: config.url,
    timeoutMs: config.timeout_ms,
    logger: deps.logger.child({ component: 'custom-extension' }),
  });
}
