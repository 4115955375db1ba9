// Wire contracts shared by envd (server side) and the aenv server (client side), and the cluster's
// scheduler.v1 service (served by `aenv scheduler`, called by nodes and gateways).
export * from './gen/process/process_pb.js';
export * from './gen/filesystem/filesystem_pb.js';
export * from './gen/scheduler/v1/scheduler_pb.js';
