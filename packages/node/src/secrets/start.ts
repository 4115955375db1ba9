import type { AenvConfig } from '@aenv/config';
import type { Logger } from '../util/log.js';
import { resolveAccessTokenSeed } from './access-token-seed.js';
import { resolveApiKey } from './api-key.js';
import { SandboxTokenIssuer } from './tokens.js';

/** The node's API key and the issuer of its sandboxes' tokens (docs/security.md). */
export function startSecrets(
  config: Pick<AenvConfig, 'home_path' | 'sandbox' | 'cluster'>,
  deps: { stored: readonly { secure: boolean; network: { allowPublicTraffic: boolean } }[]; logger: Logger },
): { apiKey: string; tokens: SandboxTokenIssuer } {
  const { logger } = deps;
  const apiKey = resolveApiKey({ homePath: config.home_path });
  logger.info({ source: apiKey.source, path: apiKey.path }, 'API key resolved');
  const seed = resolveAccessTokenSeed({
    homePath: config.home_path,
    explicitSeed: config.sandbox.access_token_hash_seed,
    hasTokenProtectedPersistedSandboxes: deps.stored.some((r) => r.secure || !r.network.allowPublicTraffic),
    schedulerEndpoint: config.cluster.scheduler_endpoint,
  });
  for (const w of seed.warnings) logger.warn(w);
  return { apiKey: apiKey.key, tokens: new SandboxTokenIssuer(seed.seed) };
}
