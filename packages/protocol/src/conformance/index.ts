// One conformance suite for every implementation of aenv's wire contract. A runner file per target starts the
// target and calls `conformanceSuite(target)`; each case group skips what the target does not expose:
//   envd:  packages/envd/src/conformance.int.test.ts  (standalone envd processes, as the envd tests start them)
//   node:  test/e2e/conformance.test.ts               (a real `aenv server`, through its proxy and API)
// The static part (our proto descriptors against the e2b SDK's) is wire-descriptors.test.ts, a unit test.
import { describe } from 'vitest';
import { accessTokenCases } from './cases/access-token.js';
import { apiCases } from './cases/api.js';
import { clientCases } from './cases/clients.js';
import { restCases } from './cases/rest.js';
import { rpcCases } from './cases/rpc.js';
import { sdkCases } from './cases/sdk.js';
import type { ConformanceTarget } from './target.js';

export type { ConformanceTarget, ControlPlane, Feature, SandboxProfile, TargetSandbox } from './target.js';
export { CLIENTS, SDK, SECURE, WIRE } from './profiles.js';

export type CaseGroup = 'rpc' | 'rest' | 'access-token' | 'sdk' | 'clients' | 'api';

const GROUPS: Record<CaseGroup, (t: ConformanceTarget) => void> = {
  rpc: rpcCases,
  rest: restCases,
  'access-token': accessTokenCases,
  sdk: sdkCases,
  clients: clientCases,
  api: apiCases,
};

/** Defines the suite's cases for `target` (call it at the top level of a test file). */
export function conformanceSuite(
  target: ConformanceTarget,
  opts: { groups?: readonly CaseGroup[] } = {},
): void {
  describe(`conformance (${target.name})`, () => {
    for (const [name, define] of Object.entries(GROUPS) as [CaseGroup, (t: ConformanceTarget) => void][]) {
      if (!opts.groups || opts.groups.includes(name)) define(target);
    }
  });
}
