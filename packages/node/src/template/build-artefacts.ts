// What template builds leave on this node besides the templates themselves: build logs (`<home>/builds`),
// uploaded build contexts (`<home>/template-files`) and the build-step cache. Each kind has a retention; all of
// them together `[template_build].artefacts_quota_mb`, past which the least recently used go first
// (docs/security.md, "Starving the others or the host"). Committed templates live in the snapshot repository
// and never count. Sizes are read from disk at every pass, so nothing is lost by a restart.
import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../util/log.js';

export type ArtefactKind = 'log' | 'upload' | 'cache';

export interface Artefact {
  kind: ArtefactKind;
  /** Build id, files hash or cache key. */
  name: string;
  bytes: number;
  /** Last write or use (ms since the epoch). */
  usedAt: number;
  remove(): Promise<void>;
}

export interface PrunePolicy {
  /** 0 = no byte limit. */
  quotaBytes: number;
  /** Per kind: unused this long, an artefact is removed (0 = no age limit). */
  retentionMs: Record<ArtefactKind, number>;
  /** Artefacts used more recently than this are never removed to make room (a build may be about to use them). */
  protectMs: number;
}

/** Which artefacts to remove: the expired ones, then the least recently used while the rest passes the quota. */
export function planPrune(
  items: readonly Artefact[],
  policy: PrunePolicy,
  now: number,
): { remove: Artefact[]; keptBytes: number } {
  const remove: Artefact[] = [];
  const kept: Artefact[] = [];
  for (const a of items) {
    const retention = policy.retentionMs[a.kind];
    if (retention > 0 && now - a.usedAt > retention) remove.push(a);
    else kept.push(a);
  }
  let total = kept.reduce((n, a) => n + a.bytes, 0);
  if (policy.quotaBytes > 0 && total > policy.quotaBytes) {
    kept.sort((a, b) => a.usedAt - b.usedAt);
    for (const a of [...kept]) {
      if (total <= policy.quotaBytes) break;
      if (now - a.usedAt < policy.protectMs) break;
      remove.push(a);
      kept.splice(kept.indexOf(a), 1);
      total -= a.bytes;
    }
  }
  return { remove, keptBytes: total };
}

/** Where each kind lives and what of it is in use (never listed). */
export interface ArtefactSources {
  logsDir: string;
  uploadsDir: string;
  /** Build ids whose build runs here now (their log is being written). */
  activeBuilds(): ReadonlySet<string>;
  /** Files hashes a running or queued build still needs. */
  uploadsInUse(): ReadonlySet<string>;
  /** The build-step cache's entries with their sizes. */
  cacheEntries(): Promise<Artefact[]>;
}

async function filesIn(
  dir: string,
  re: RegExp,
): Promise<{ name: string; path: string; bytes: number; mtimeMs: number }[]> {
  const out = [];
  for (const file of await readdir(dir).catch(() => [] as string[])) {
    const m = re.exec(file);
    if (!m) continue;
    const path = join(dir, file);
    const st = await stat(path).catch(() => undefined);
    if (st?.isFile()) out.push({ name: m[1]!, path, bytes: st.blocks * 512, mtimeMs: st.mtimeMs });
  }
  return out;
}

export class BuildArtefacts {
  private running: Promise<number> | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly sources: ArtefactSources,
    readonly policy: PrunePolicy,
    private readonly logger: Logger,
  ) {}

  async list(): Promise<Artefact[]> {
    const active = this.sources.activeBuilds();
    const inUse = this.sources.uploadsInUse();
    const logs = (await filesIn(this.sources.logsDir, /^(.+)\.log$/))
      .filter((f) => !active.has(f.name))
      .map((f): Artefact => ({
        kind: 'log',
        name: f.name,
        bytes: f.bytes,
        usedAt: f.mtimeMs,
        remove: () => rm(f.path, { force: true }),
      }));
    const uploads = (await filesIn(this.sources.uploadsDir, /^([0-9a-f]{64})\.tar(?:\.gz)?$/))
      .filter((f) => !inUse.has(f.name))
      .map((f): Artefact => ({
        kind: 'upload',
        name: f.name,
        bytes: f.bytes,
        usedAt: f.mtimeMs,
        remove: () => rm(f.path, { force: true }),
      }));
    return [...logs, ...uploads, ...(await this.sources.cacheEntries())];
  }

  /** One pass (passes never overlap); resolves with the bytes the artefacts hold after it. */
  prune(now = Date.now()): Promise<number> {
    this.running ??= this.pass(now).finally(() => (this.running = undefined));
    return this.running;
  }

  private async pass(now: number): Promise<number> {
    const items = await this.list();
    const { remove, keptBytes } = planPrune(items, this.policy, now);
    let freed = 0;
    for (const a of remove) {
      try {
        await a.remove();
        freed += a.bytes;
      } catch (err) {
        this.logger.warn({ err, kind: a.kind, name: a.name }, 'could not remove a build artefact');
      }
    }
    if (remove.length) {
      this.logger.info(
        {
          removed: remove.map((a) => `${a.kind}:${a.name}`),
          freedBytes: freed,
          keptBytes,
          quotaBytes: this.policy.quotaBytes,
        },
        'build artefacts pruned (retention or template_build.artefacts_quota_mb)',
      );
    }
    return keptBytes;
  }

  /** Bytes a new artefact may still take after a pass (Infinity without a quota). */
  async room(): Promise<number> {
    const used = await this.prune();
    return this.policy.quotaBytes > 0 ? Math.max(0, this.policy.quotaBytes - used) : Infinity;
  }

  /** Prunes every `intervalMs` (retention passes without builds); the timer never holds the process. */
  start(intervalMs: number): void {
    const tick = () => {
      void this.prune()
        .catch((err: unknown) => this.logger.warn({ err }, 'build artefact pruning failed'))
        .finally(() => {
          if (this.timer) this.timer = setTimeout(tick, intervalMs).unref();
        });
    };
    this.timer = setTimeout(tick, intervalMs).unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running?.catch(() => {});
  }
}
