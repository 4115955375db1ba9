// aenv gateway: cluster mode (reference §6: scheduler.v1 gRPC placement and bindings; gateway routing and list
// aggregation). Not built yet: a single node needs neither — its API is the entry point. See docs/architecture.md.
export const CLUSTER_MODE_AVAILABLE = false;

/** Entry point of `aenv gateway`; exits with a clear message until cluster mode exists. */
export function main(): number {
  process.stderr.write(
    'aenv gateway: cluster mode is not implemented yet; run a single node with `aenv server`\n',
  );
  return 2;
}
