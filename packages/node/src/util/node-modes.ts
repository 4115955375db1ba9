import { isAbsolute, join, relative, sep } from 'node:path';
import { privatizeTree } from './private-tree.js';

/** Mode of the directories sandbox uids pass through (search only: no listing, no reading). */
export const TRAVERSE_ONLY = 0o711;

export interface NodeDirs {
  home: string;
  runtime: string;
  deps: string;
  /** `<home>/sandboxes`: the container driver keeps its modes (it knows which dirs hold sandbox files). */
  sandboxes: string;
  /** Trees that hold image or sandbox content (image cache, capture work): made 0700, content left alone. */
  contentRoots: string[];
  /** Paths below `home` whose modes the runtime driver sets itself (sandbox uids must reach them). */
  driverOwned?: string[];
}

function inside(dir: string, p: string): boolean {
  const r = relative(dir, p);
  return r === '' || (r !== '..' && !r.startsWith(`..${sep}`) && !isAbsolute(r));
}

/**
 * Makes the node's directories private at every start (and so fixes trees written by older versions):
 * everything 0700 / owner-only files, except where a sandbox uid must pass (docs/security.md, "local host
 * users"):
 * - `home` 0711: the runtime driver prepares a sandbox's root and binds as the sandbox's mapped root, which must reach
 *   `home/sandboxes/<id>/rootfs` and the tools dir;
 * - `deps` and `deps/tools` 0711 for the tools dir, whose version dirs are readable by all (they are
 *   mounted read-only into every sandbox, hold no secret, and are made so after they are built);
 * - `home/sandboxes` is the driver's (0711, and each sandbox dir 0710 for its own uid only).
 * Returns how many entries were changed.
 */
export async function enforceNodeDirModes(d: NodeDirs): Promise<number> {
  let changed = 0;
  const toolsRoot = join(d.deps, 'tools');
  const homeRule = (p: string) => {
    if (p === d.home) return TRAVERSE_ONLY;
    if (p === d.sandboxes || inside(d.deps, p) || d.driverOwned?.includes(p)) return 'skip';
    if (d.contentRoots.some((c) => c === p)) return 'self';
    return 'descend';
  };
  changed += await privatizeTree(d.home, { rule: homeRule });
  changed += await privatizeTree(d.deps, {
    rule: (p) => {
      if (p === d.deps || p === toolsRoot) return TRAVERSE_ONLY;
      // tools/<version>: readable by sandboxes (see makeReadOnlyForAll); tools/.native-* build caches stay private.
      if (p.startsWith(`${toolsRoot}${sep}`) && !relative(toolsRoot, p).includes(sep)) {
        return p.slice(toolsRoot.length + 1).startsWith('.') ? 'descend' : 'skip';
      }
      return 'descend';
    },
  });
  changed += await privatizeTree(d.runtime);
  return changed;
}
