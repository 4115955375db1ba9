import { describe, expect, it } from 'vitest';
import type { V1Endpoint, V1EndpointSlice } from '@kubernetes/client-node';
import { nodesFromEndpointSlices } from './endpoint-slices.js';

function endpoint(
  pod: string | undefined,
  addresses: string[],
  conditions: V1Endpoint['conditions'] = { serving: true },
): V1Endpoint {
  return { addresses, conditions, ...(pod ? { targetRef: { kind: 'Pod', name: pod } } : {}) };
}

function slice(endpoints: V1Endpoint[], port = 8000): V1EndpointSlice {
  return { addressType: 'IPv4', endpoints, ports: [{ name: 'http', port }] };
}

describe('nodesFromEndpointSlices', () => {
  it('takes serving endpoints with a pod and an IP, brackets IPv6, and lets terminating ones linger', () => {
    const nodes = nodesFromEndpointSlices(
      [
        slice([
          endpoint('node-a', ['10.0.0.1']),
          endpoint('node-b', ['not-an-ip', 'fd00::2']),
          endpoint('node-c', ['10.0.0.3'], { serving: true, terminating: true }),
          endpoint('node-d', ['10.0.0.4'], { serving: false, ready: false }),
          endpoint('node-e', ['10.0.0.5'], { ready: true }),
          endpoint(undefined, ['10.0.0.6']),
          endpoint('node-g', []),
        ]),
        slice([endpoint('node-h', ['10.0.0.8'])], 9999),
      ],
      { port: 8000, scheme: 'http' },
    );
    expect(nodes.active).toEqual([
      { id: 'node-a', endpoint: 'http://10.0.0.1:8000' },
      { id: 'node-b', endpoint: 'http://[fd00::2]:8000' },
    ]);
    expect(nodes.lingering).toEqual([{ id: 'node-c', endpoint: 'http://10.0.0.3:8000' }]);
  });

  it('drops ignored pods, makes no-schedule pods linger, and uses the configured scheme', () => {
    const nodes = nodesFromEndpointSlices(
      [slice([endpoint('a', ['10.0.0.1']), endpoint('b', ['10.0.0.2']), endpoint('c', ['10.0.0.3'])])],
      {
        port: 8000,
        scheme: 'https',
        ignored: (pod) => pod === 'a',
        noSchedule: (pod) => pod === 'b',
      },
    );
    expect(nodes.active).toEqual([{ id: 'c', endpoint: 'https://10.0.0.3:8000' }]);
    expect(nodes.lingering).toEqual([{ id: 'b', endpoint: 'https://10.0.0.2:8000' }]);
  });

  it('counts a pod listed twice (two slices during a rollout) once, lingering if either copy is terminating', () => {
    const nodes = nodesFromEndpointSlices(
      [
        slice([endpoint('a', ['10.0.0.1'], { serving: true, terminating: true })]),
        slice([endpoint('a', ['10.0.0.1'])]),
      ],
      { port: 8000, scheme: 'http' },
    );
    expect(nodes).toEqual({ active: [], lingering: [{ id: 'a', endpoint: 'http://10.0.0.1:8000' }] });
  });
});
