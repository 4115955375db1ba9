import { DomainError, ErrorKind } from '@aenv/protocol';
import type { VolumeMountRecord } from '../volume/types.js';
import type { LaunchableTemplate, TemplateLookup } from '../orchestrator/orchestrator.js';
import type { SandboxNetworkSettings } from '../orchestrator/types.js';
import {
  DEFAULT_TAG,
  isRepositoryError,
  type SnapshotRecord,
  type SnapshotRepository,
} from '../snapshot/index.js';

export interface TemplateCatalogOptions {
  repository: SnapshotRepository;
  virtualizationMode: string;
  /** envd version reported for records that did not record one. */
  envdVersion: string;
  /** The custom extension params a capture's `committed.extra` records (the backend reads its capture format). */
  extensionParamsOf(extra: unknown): Record<string, unknown> | undefined;
  /** The volumes a capture's `committed.extra` records as mounted (docs/volumes.md). */
  volumeMountsOf(extra: unknown): VolumeMountRecord[] | undefined;
  /** The network settings a capture records (docs/networking.md#snapshot-launches); throws when they are damaged. */
  networkOf(snapshotId: string, extra: unknown): SandboxNetworkSettings | undefined;
}

/** Names the SDK may use for a template: `ns/name:tag` → `name` (docs/templates.md). */
export function candidateNames(ref: string): string[] {
  const out = [ref];
  let bare = ref;
  const slash = bare.lastIndexOf('/');
  if (slash >= 0) bare = bare.slice(slash + 1);
  const colon = bare.indexOf(':');
  if (colon >= 0) bare = bare.slice(0, colon);
  if (bare && bare !== ref) out.push(bare);
  return out;
}

/** `ns/name:tag` → `{name, tag}` (the namespace is dropped; no tag → undefined). */
export function parseTemplateRef(ref: string): { name: string; tag?: string } {
  const slash = ref.lastIndexOf('/');
  const bare = slash >= 0 ? ref.slice(slash + 1) : ref;
  const colon = bare.indexOf(':');
  return colon >= 0 ? { name: bare.slice(0, colon), tag: bare.slice(colon + 1) } : { name: bare };
}

/** Whether `record` carries `tag` (every record has `default`). */
export function hasTag(record: SnapshotRecord, tag: string | undefined): boolean {
  return tag === undefined || tag === DEFAULT_TAG || (record.tags ?? []).some((t) => t.tag === tag);
}

/** Resolves `templateID` of a create request to a committed template or snapshot of the repository. */
export class TemplateCatalog implements TemplateLookup {
  constructor(private readonly opts: TemplateCatalogOptions) {}

  /** The record `ref` names: an id or alias, `ns/` dropped; with `:tag`, only if the record has that tag. */
  async find(ref: string): Promise<SnapshotRecord | undefined> {
    const { tag } = parseTemplateRef(ref);
    for (const name of candidateNames(ref)) {
      let rec: SnapshotRecord | undefined;
      try {
        rec = await this.opts.repository.find(name);
      } catch (e) {
        // An invalid alias (characters outside [A-Za-z0-9_-]) simply names nothing here.
        if (isRepositoryError(e, 'InvalidRequest')) continue;
        throw e;
      }
      if (rec && rec.source.kind !== 'paused') return name === ref || hasTag(rec, tag) ? rec : undefined;
    }
    return undefined;
  }

  async resolveLaunchable(ref: string): Promise<LaunchableTemplate> {
    const rec = await this.find(ref);
    if (!rec) throw new DomainError(ErrorKind.NotFound, `template ${ref} not found`);
    const committed = rec.committed;
    if (!committed) {
      const status = rec.source.kind === 'template' ? rec.source.build.status : 'uncommitted';
      throw new DomainError(
        ErrorKind.InvalidState,
        `template '${ref}' is not ready (build status: ${status})`,
      );
    }
    if (committed.virtualizationMode !== this.opts.virtualizationMode) {
      // A fact about the template and the node, not a host detail: the caller may read it.
      throw new DomainError(
        ErrorKind.Internal,
        `template '${ref}' was captured in ${committed.virtualizationMode} mode; this node runs ${this.opts.virtualizationMode}`,
        { expose: true },
      );
    }
    // A snapshot launches with its source's custom extension params unless the create brings its own.
    const params = this.opts.extensionParamsOf(committed.extra);
    const volumeMounts = this.opts.volumeMountsOf(committed.extra);
    // ...and with its source's network settings unless the create brings its own (orchestrator `createFrom`).
    const network = this.networkOf(rec.id, committed.extra);
    return {
      templateId: rec.id,
      ...(rec.alias ? { alias: rec.alias } : {}),
      record: rec,
      resources: rec.resources,
      envdVersion: committed.runtimeVersions.envd ?? this.opts.envdVersion,
      defaultUser: committed.context.user ?? 'root',
      envVars: committed.context.envVars,
      ...(params ? { customExtensionParams: params } : {}),
      ...(volumeMounts ? { volumeMounts } : {}),
      ...(network ? { network } : {}),
      ...(committed.context.workdir && committed.context.workdir !== '/'
        ? { defaultWorkdir: committed.context.workdir }
        : {}),
    };
  }

  private networkOf(id: string, extra: unknown): SandboxNetworkSettings | undefined {
    try {
      return this.opts.networkOf(id, extra);
    } catch (err) {
      // Not launched without it (a looser sandbox than the one captured); the message names no value.
      throw new DomainError(ErrorKind.Internal, err instanceof Error ? err.message : String(err), {
        expose: true,
      });
    }
  }
}
