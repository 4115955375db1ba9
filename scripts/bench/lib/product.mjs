// The product code and test harness the benchmark reuses (TypeScript, loaded through tsx). Read-only use:
// the raw twins take their CRIU settings and host-tool runner from the same modules the server uses.
import { URL } from 'node:url';
import { register } from 'tsx/esm/api';

register();

const here = (p) => new URL(p, import.meta.url).href;

export const harness = await import(here('../../../test/e2e/harness.ts'));
export const { run } = await import(here('../../../packages/node/src/util/exec.ts'));
export const criu = await import(here('../../../packages/node/src/runtime/drivers/container/criu.ts'));
export const { overlayOptions } = await import(
  here('../../../packages/node/src/runtime/drivers/container/mounts.ts')
);
export const { parseServerTiming } = await import(here('../../../packages/node/src/util/phases.ts'));
export const { EnvdRpcClient } = await import(here('../../../packages/protocol/src/clients/envd/rpc.ts'));
