// Wire contracts shared by envd (server side) and the aenv server (client side).
export * from './gen/process/process_pb.js';
export * from './gen/filesystem/filesystem_pb.js';
export * from './errors/index.js';
export * from './ids.js';
