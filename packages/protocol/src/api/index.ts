// The E2B control plane as aenv serves it: request schemas, answer shapes, error body, headers, pagination.
export * from './errors.js';
export * from './headers.js';
export * from './pagination.js';
export * from './responses.js';
export * from './schemas.js';
export * from './webhooks.js';
