// envd's wire contract, and nothing else: what the in-sandbox daemon (bundled, so kept lean) imports as
// `@aenv/protocol/envd`. The node side gets the same through `@aenv/protocol`.
export * from '../gen/process/process_pb.js';
export * from '../gen/filesystem/filesystem_pb.js';
export * from './constants.js';
export * from './headers.js';
export * from './init.js';
export * from './signing.js';
export * from './safe-equal.js';
