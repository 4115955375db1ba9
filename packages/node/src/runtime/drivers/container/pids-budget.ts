import { readFile } from 'node:fs/promises';
import { RuntimeError } from '../../driver.js';

/** The automatic per-sandbox share of the node's budget: this many sandboxes at their limit fill it. */
const SANDBOXES_PER_BUDGET = 16;
const MIN_AUTO_PER_SANDBOX = 64;
const MAX_AUTO_PER_SANDBOX = 4096;

export interface PidsBudget {
  /** `pids.max` of the cgroup parent of all sandboxes. */
  node: number;
  /** `pids.max` of each sandbox. */
  perSandbox: number;
}

/**
 * `[runtime].node_pids_limit` and `pids_limit` resolved against the kernel's `pid_max` (0 = automatic):
 * the node gets half of the host's PIDs (the rest stays with the host), each sandbox a sixteenth of the
 * node's (at least 64, at most 4096).
 */
export function resolvePidsBudget(
  configured: { node: number; perSandbox: number },
  pidMax: number,
): PidsBudget {
  const node = configured.node > 0 ? configured.node : Math.floor(pidMax / 2);
  if (node >= pidMax) {
    throw new RuntimeError(
      'HostSetup',
      `runtime.node_pids_limit = ${node}: must stay below the kernel's pid_max (${pidMax}), or the host can run out of PIDs`,
    );
  }
  const auto = Math.min(
    MAX_AUTO_PER_SANDBOX,
    Math.max(MIN_AUTO_PER_SANDBOX, Math.floor(node / SANDBOXES_PER_BUDGET)),
  );
  const perSandbox = configured.perSandbox > 0 ? configured.perSandbox : Math.min(auto, node);
  if (perSandbox > node) {
    throw new RuntimeError(
      'HostSetup',
      `runtime.pids_limit = ${perSandbox}: is above runtime.node_pids_limit (${node}), the budget of all sandboxes together`,
    );
  }
  return { node, perSandbox };
}

export async function readPidMax(): Promise<number> {
  return Number((await readFile('/proc/sys/kernel/pid_max', 'utf8')).trim());
}
