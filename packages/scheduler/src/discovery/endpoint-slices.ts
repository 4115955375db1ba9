import { isIP } from 'node:net';
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { joinHostPort } from '../config/listen-address.js';
import type { NodeRef } from '../registry/node-registry.js';

export interface DiscoveredNodes {
  active: NodeRef[];
  lingering: NodeRef[];
}

/**
 * Nodes from the EndpointSlices of the headless node Service (docs/cluster.md#kubernetes-discovery), as the
 * reference reads them: slices that carry `port`; endpoints that are serving, name a target pod (its name
 * is the node id) and have an IP address; terminating ones linger. `ignored` pods are dropped, `noSchedule`
 * pods linger.
 */
export function nodesFromEndpointSlices(
  slices: readonly V1EndpointSlice[],
  opts: {
    port: number;
    scheme: string;
    ignored?: (podName: string) => boolean;
    noSchedule?: (podName: string) => boolean;
  },
): DiscoveredNodes {
  const active = new Map<string, NodeRef>();
  const lingering = new Map<string, NodeRef>();
  const scheme = opts.scheme.trim() || 'http';
  for (const slice of slices) {
    if (!slice.ports?.some((p) => p.port === opts.port)) continue;
    for (const endpoint of slice.endpoints ?? []) {
      if (endpoint.conditions?.serving !== true) continue;
      const id = endpoint.targetRef?.name ?? '';
      if (id === '') continue;
      const address = endpoint.addresses?.map((a) => a.trim()).find((a) => isIP(a) !== 0);
      if (!address) continue;
      if (opts.ignored?.(id)) continue;
      const node = { id, endpoint: `${scheme}://${joinHostPort(address, opts.port)}` };
      const terminating = endpoint.conditions?.terminating === true || opts.noSchedule?.(id) === true;
      if (terminating) {
        active.delete(id);
        lingering.set(id, node);
      } else if (!lingering.has(id)) active.set(id, node);
    }
  }
  return { active: [...active.values()], lingering: [...lingering.values()] };
}
