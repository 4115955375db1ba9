// config/deps_manifest.toml: every host dependency of a node by virtualization mode, with version and source.
// scripts/setup-host.sh installs from it (scripts/lib/deps-manifest.sh reads the same file); the node reads it
// here to report what `aenv server --setup-only` set up.
import { readFileSync } from 'node:fs';
import { parse as parseToml } from 'smol-toml';

export const DEP_GROUPS = ['runtime', 'images', 'test'] as const;
export const DEP_SOURCES = ['debian', 'debian-suite', 'host', 'npm'] as const;

export interface HostDependency {
  name: string;
  /** Virtualization modes that need it; "all" = every mode. */
  modes: string[];
  group: (typeof DEP_GROUPS)[number];
  source: (typeof DEP_SOURCES)[number];
  package: string;
  /** "host" (what the host release ships) or ">=x.y". */
  version: string;
  /** The Debian suite of a `debian-suite` package. */
  suite?: string;
  why: string;
}

/** Reads and checks the manifest; a malformed entry is an error naming it. */
export function readDepsManifest(path: string): HostDependency[] {
  const doc = parseToml(readFileSync(path, 'utf8')) as { deps?: Record<string, Record<string, unknown>> };
  const deps = Object.entries(doc.deps ?? {});
  if (deps.length === 0) throw new Error(`${path}: no [deps.<name>] tables`);
  return deps.map(([name, d]) => {
    const bad = (why: string) => new Error(`${path}: [deps.${name}] ${why}`);
    const text = (key: string): string => {
      const v = d[key];
      if (typeof v !== 'string' || v === '') throw bad(`needs ${key} = "…"`);
      return v;
    };
    const modes = d.modes;
    if (!Array.isArray(modes) || modes.length === 0 || !modes.every((m) => typeof m === 'string'))
      throw bad('needs modes = ["…"]');
    const group = text('group');
    if (!(DEP_GROUPS as readonly string[]).includes(group))
      throw bad(`group must be one of ${DEP_GROUPS.join(', ')}`);
    const source = text('source');
    if (!(DEP_SOURCES as readonly string[]).includes(source))
      throw bad(`source must be one of ${DEP_SOURCES.join(', ')}`);
    const version = text('version');
    if (version !== 'host' && !/^>=\d+(\.\d+)*$/.test(version))
      throw bad('version must be "host" or ">=x.y"');
    if (source === 'debian-suite' && typeof d.suite !== 'string')
      throw bad('needs suite = "…" (source debian-suite)');
    const known = new Set(['modes', 'group', 'source', 'package', 'version', 'suite', 'why']);
    const extra = Object.keys(d).filter((k) => !known.has(k));
    if (extra.length) throw bad(`has unknown keys: ${extra.join(', ')}`);
    return {
      name,
      modes: modes as string[],
      group: group as HostDependency['group'],
      source: source as HostDependency['source'],
      package: text('package'),
      version,
      ...(typeof d.suite === 'string' ? { suite: d.suite } : {}),
      why: text('why'),
    };
  });
}

/** The dependencies of `mode` (and of every mode) in `groups`. */
export function dependenciesOfMode(
  deps: readonly HostDependency[],
  mode: string,
  groups: readonly HostDependency['group'][] = DEP_GROUPS,
): HostDependency[] {
  return deps.filter((d) => (d.modes.includes('all') || d.modes.includes(mode)) && groups.includes(d.group));
}
