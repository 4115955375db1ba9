// The end-to-end benchmark suites of `npm run bench`: each measures an operation through a real aenv node
// (driven with the e2b SDK or its HTTP API) and the same operation done raw, in the same run.
// Entry point: scripts/bench/run.mjs (options, load check, table). This module holds the shared context:
// the nodes (started on first use), the raw-twin lab, and their cleanup.
import {
  MAIN_NODE,
  DISK_NODE,
  EAGER_NODE,
  LAZY_NODE,
  START_NODE,
  WARM_NODE,
  removeNode,
  startNode,
} from './lib/nodes.mjs';
import { RawLab, removeRawLeftovers } from './lib/raw.mjs';
import { sandboxLayers, sandboxOciConfig } from './lib/sandbox-facts.mjs';
import { BURST_CREATES, createSuite } from './lib/suites/create.mjs';
import { execSuite } from './lib/suites/exec.mjs';
import { memorySuite } from './lib/suites/memory.mjs';
import { pauseSuite } from './lib/suites/pause.mjs';
import { resumeSuite } from './lib/suites/resume.mjs';
import { templateSuite } from './lib/suites/template.mjs';
import { Sandbox } from 'e2b';

export const SUITES = {
  create: createSuite,
  exec: execSuite,
  memory: memorySuite,
  pause: pauseSuite,
  template: templateSuite,
  resume: resumeSuite,
};

// The main node keeps paused sandboxes resident (resume = thaw); the disk node releases their memory at
// once (resume = restore from the checkpoint on disk).
const MAIN_TOML = '[orchestrator]\nresident_pause_grace_secs = 86400\n';
const DISK_TOML = '[orchestrator]\nresident_pause_grace_secs = 0\n';
// The resume suite's two nodes: like the disk node, with room for a 1 GB workload; one restores checkpoints
// above 64 MiB lazily (docs/runtime.md#lazy-restore).
const RESUME_TOML = `${DISK_TOML}[machine]\nmem_size_mib = 2048\n`;
const LAZY_RUNTIME = ['lazy_restore_min_mib = 64'];

/** Shared state of one benchmark run; nodes and the raw lab are made on first use. */
export function createContext(opts, report, log) {
  const started = new Map();
  let lab = null;
  /**
   * @param {string} name @param {string} toml @param {number} [warm]
   * @param {{runtime?: string[], pool?: Record<string, number>, startCaptures?: boolean}} [extra]
   */
  const node = (name, toml, warm = 0, extra = {}) => {
    if (!started.has(name)) {
      log(`starting aenv node "${name}"`);
      started.set(name, startNode(name, toml, warm, extra));
    }
    return started.get(name);
  };
  const ctx = {
    opts,
    report,
    /** Samples one suite hands to another (e.g. resume from disk, for the template comparison). */
    shared: {},
    mainNode: () => node(MAIN_NODE, MAIN_TOML),
    diskNode: () => node(DISK_NODE, DISK_TOML),
    eagerNode: () => node(EAGER_NODE, RESUME_TOML),
    lazyNode: () => node(LAZY_NODE, RESUME_TOML, 0, { runtime: LAZY_RUNTIME }),
    /**
     * Node with the warm sandbox pool as the product ships it (2 per template, growing with demand up to 64,
     * refilled from the start capture once it is made); creates in progress allowed up to BURST_CREATES, so a
     * burst of that many is not answered 429.
     */
    warmNode: () =>
      node(WARM_NODE, `[limits]\nmax_concurrent_creates = ${BURST_CREATES}\n`, 2, {
        pool: { low_watermark: 2, high_watermark: 64 },
        startCaptures: true,
      }),
    /** Node without the warm pool whose creates restore the base template's start capture (the default). */
    startNode: () => node(START_NODE, '', 0, { startCaptures: true }),
    /** The raw twins' lab, set up from a live `base` sandbox's OCI config and overlay layers. */
    rawLab() {
      lab ??= (async () => {
        const main = await ctx.mainNode();
        const ref = await Sandbox.create({ ...main.sdk, timeoutMs: 300_000 });
        try {
          const layers = sandboxLayers(main, ref.sandboxId);
          const l = new RawLab({
            criuPath: opts.criuPath,
            template: sandboxOciConfig(main, ref.sandboxId),
            lowerDirs: layers.lowerDirs,
            layersOwner: layers.owner,
          });
          await l.init();
          return l;
        } finally {
          await ref.kill().catch(() => {});
        }
      })();
      return lab;
    },
    /**
     * Stops the nodes and removes everything of theirs and of the raw lab. With `keep`, the nodes are
     * killed (their sandboxes keep running) and nothing is removed. Returns what is still on the host.
     */
    async close({ keep }) {
      const left = {};
      for (const [name, p] of started) {
        const n = await p.catch(() => null);
        if (keep) {
          await n?.server.crash().catch(() => {});
          continue;
        }
        if (n) await n.server.shutdown().catch((e) => log(`node ${name}: shutdown failed: ${e.message}`));
        left[name] = await removeNode(name);
      }
      const l = lab ? await lab.catch(() => null) : null;
      if (!keep && lab) left.raw = l ? await l.close() : await removeRawLeftovers();
      return left;
    },
  };
  return ctx;
}
