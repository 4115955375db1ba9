// Per-sandbox networking: netns slots, addresses, NAT, nftables egress policy, warm pool, cleanup.

export type { EgressPolicy, NetworkSlot } from './types.js';
export {
  NetworkManager,
  type NetworkLogger,
  type NetworkManagerOptions,
  type ReconcileReport,
} from './manager.js';
export {
  parseNetworkPolicy,
  egressProxyRefusedRanges,
  refuseEgressProxyIn,
  refuseUnknownSecrets,
  refuseUnresolvableEgressProxy,
  NetworkPolicyError,
  DEFAULT_EGRESS_POLICY,
  MAX_POLICY_ENTRIES,
  type NetworkPolicyInput,
} from './policy.js';
export { UpstreamResolver } from './egress/upstream.js';
