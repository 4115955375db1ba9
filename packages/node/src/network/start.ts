import type { AenvConfig } from '@aenv/config';
import type { Registry } from 'prom-client';
import type { Logger } from '../util/log.js';
import type { Subsystem } from '../util/subsystem.js';
import { NetworkManager } from './manager.js';
import type { NodeCa } from './egress/node-ca.js';
import { upstreamTrust } from './egress/trust-store.js';

export type NetworkSection = Pick<
  AenvConfig,
  'network' | 'pool' | 'tools' | 'resource_prefix' | 'runtime_path'
>;

/** `[network]` and `[pool.network]`: the netns slots, their warm pool and the egress policy. */
export function startNetwork(
  config: NetworkSection,
  deps: {
    logger: Logger;
    registry: Registry;
    egressCa?: NodeCa;
    /** A `/secrets` value by name, for `${e2b.secrets.<name>}` in rule headers. */
    secretValue?: (name: string) => string | undefined;
  },
): Subsystem & { network: NetworkManager } {
  const network = new NetworkManager({
    runtimePath: config.runtime_path,
    internal: {
      hostInteractionCidr: config.network.internal.host_interaction_cidr,
      vethCidr: config.network.internal.veth_cidr,
    },
    egress: { alwaysDeniedCidrs: config.network.egress.always_denied_cidrs },
    domainEgress: {
      proxyPorts: [80, 443],
      proxyListenPort: config.network.egress.proxy_listen_port,
      dnsListenPort: config.network.egress.dns_listen_port,
      resolvers: config.network.egress.resolvers,
      ...(deps.egressCa
        ? {
            intercept: {
              ca: deps.egressCa,
              upstreamCa: upstreamTrust(config.network.egress.upstream_ca_file),
              ...(deps.secretValue ? { secretValue: deps.secretValue } : {}),
            },
          }
        : {}),
    },
    nameserver: config.network.dns.nameserver,
    pool: {
      lowWatermark: config.pool.low_watermark,
      highWatermark: config.pool.high_watermark,
      maintenanceEnabled: config.pool.network.maintenance_enabled,
      startupPrewarm: config.pool.network.startup_prewarm,
      enabled: config.pool.network.enabled,
    },
    controlPlanePort: config.tools.control_plane_port,
    namePrefix: config.resource_prefix,
    logger: deps.logger.child({ component: 'network' }),
    metricsRegistry: deps.registry,
  });
  return { network, close: () => network.shutdown() };
}
