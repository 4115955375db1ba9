export {
  SecretError,
  readManagedSecret,
  createManagedSecret,
  type ManagedSecretOptions,
} from './managed-secret.js';
export {
  resolveApiKey,
  validateApiKey,
  generateApiKey,
  API_KEY_ENV,
  EXTERNAL_API_KEY_PATH,
  type ApiKeySource,
  type ResolveApiKeyOptions,
  type ResolvedApiKey,
} from './api-key.js';
export {
  resolveAccessTokenSeed,
  SEED_ENV,
  type ResolveSeedOptions,
  type ResolvedSeed,
  type SeedSource,
} from './access-token-seed.js';
export {
  resolveRecordSigningKey,
  RECORD_SIGNING_ENV,
  type RecordSigningKeySource,
  type ResolveRecordSigningKeyOptions,
  type ResolvedRecordSigningKey,
} from './record-signing-key.js';
export {
  envdAccessToken,
  trafficAccessToken,
  envdInitKey,
  verifyToken,
  safeEqual,
  SandboxTokenIssuer,
  type TokenKind,
} from './tokens.js';
