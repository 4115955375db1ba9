// aenv scheduler: placement, sandbox→node bindings and heartbeats of a cluster, over gRPC scheduler.v1
// (docs/cluster.md). Nodes (heartbeat reporter) and gateways use createSchedulerClient.
export { runSchedulerCommand, parseSchedulerArgs } from './cli.js';
export { startScheduler, type RunningScheduler } from './run.js';
export { loadSchedulerConfig } from './config/load.js';
export {
  ClusterConfigError,
  defaultClusterConfig,
  applyConfigDocument,
  applyEnvironment,
  validateGatewaySection,
  type ClusterConfig,
  type GatewaySection,
  type SchedulerSection,
} from './config/cluster-config.js';
export { parseGoDuration } from './config/duration.js';
export { parseListenAddress, type ListenAddress } from './config/listen-address.js';
export { createSchedulerClient, type SchedulerClient } from './client.js';
export { createLogger } from './log.js';
