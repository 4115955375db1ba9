// aenv gateway: the single entry point of a cluster (docs/cluster.md#the-gateway): E2B API and sandbox traffic
// routed to nodes through the scheduler's bindings, creates placed by Schedule, lists merged across nodes.
export { runGatewayCommand, parseGatewayArgs } from './cli.js';
export { startGateway, type RunningGateway } from './run.js';
export { route, needsApiKey, normalizeDomains, hostRoute, type Route } from './routing.js';
