// The template builder: runs accepted builds in the background (at most `maxConcurrentBuilds` at once), each in
// a temporary build sandbox, and turns the result into the committed content of the template record.
//
// Build status lives in the repository record (waiting → building → ready | error with reason {message, step});
// logs in BuildLogStore. A marker file `<markersDir>/<id>.running` exists while this node builds a template, so
// that a build interrupted by a crash or restart ends `error` at the next startup (only this node's builds: in a
// shared repository other nodes may be building theirs).
import { existsSync } from 'node:fs';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DomainError, ErrorKind, shuttingDown } from '@aenv/protocol';
import type { ImageService, PulledImage } from '../image/index.js';
import {
  isRepositoryError,
  type SnapshotRecord,
  type SnapshotRepository,
  type StartupCommand,
} from '../snapshot/index.js';
import type { Logger } from '../util/log.js';
import type { BuildCache } from './build-cache.js';
import { cacheKeys } from './build-cache.js';
import type { BuildLog, BuildLogStore } from './build-log.js';
import { selectEntries, type BuildLogEntry, type LogQuery } from './build-log.js';
import type { BuildSandbox, TemplateBuildHost } from './build-host.js';
import {
  cloneState,
  contextOf,
  E2B_DEFAULT_USER,
  stateFromContext,
  stateFromImage,
  type BuildState,
} from './build-state.js';
import { candidateNames } from './catalog.js';
import type { TemplateFileStore } from './file-store.js';
import { runStartup, StartupError } from './startup.js';
import { StepError, StepRunner } from './step-runner.js';
import { changesDisk, firstForcedStep, parseBuildSpec, type BuildSpec } from './steps.js';

export interface StartupTimings {
  readyIntervalMs?: number;
  readyTimeoutMs?: number;
  defaultReadyMs?: number;
}

export interface TemplateBuilderOptions {
  repository: SnapshotRepository;
  images: ImageService;
  /** Build sandboxes, saved disks and captures (the node's backend). */
  host: TemplateBuildHost;
  files: TemplateFileStore;
  logs: BuildLogStore;
  cache: BuildCache;
  /** Scratch dir for disk snapshots (on the CoW volume, next to the cache). */
  workDir: string;
  /** Where `<id>.running` markers live. */
  markersDir: string;
  maxConcurrentBuilds: number;
  /** `[template_build].max_build_secs` in ms: a build running longer is aborted and ends `error`. */
  maxBuildMs: number;
  /** `[image.resolver].default_image` */
  defaultImage: string;
  newSandboxId: () => string;
  nodeName: string;
  logger: Logger;
  startup?: StartupTimings;
  /** Told when a build has ended (its leftovers may be pruned now). */
  onFinished?: (templateId: string) => void;
}

export interface BuildStatusView {
  templateID: string;
  buildID: string;
  status: 'waiting' | 'building' | 'ready' | 'error';
  logs: string[];
  logEntries: BuildLogEntry[];
  reason?: { message: string; step?: string };
}

interface Job {
  id: string;
  spec: BuildSpec;
  abort: AbortController;
  done: Promise<void>;
}

/** The base a build starts from, resolved. */
interface ResolvedBase {
  image: PulledImage;
  /** The parent template's disk (a saved disk), for builds from a template that has one. */
  disk?: string;
  state: BuildState;
  key: string;
  startup?: StartupCommand;
}

const SHUTDOWN_REASON = 'the aenv server shut down while the build was running';

function errorMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

const invalidArgument = (message: string, cause?: unknown): DomainError =>
  new DomainError(ErrorKind.InvalidArgument, message, cause === undefined ? {} : { cause });
const invalidState = (message: string): DomainError => new DomainError(ErrorKind.InvalidState, message);

export class TemplateBuilder {
  private readonly jobs = new Map<string, Job>();
  private readonly queue: (() => void)[] = [];
  private running = 0;
  private closed = false;

  constructor(private readonly o: TemplateBuilderOptions) {}

  private get log(): Logger {
    return this.o.logger;
  }

  private marker(id: string): string {
    return join(this.o.markersDir, `${id}.running`);
  }

  /** Ends builds this node was running when it stopped; cleans what they left. */
  async init(): Promise<void> {
    await mkdir(this.o.markersDir, { recursive: true, mode: 0o700 });
    await mkdir(this.o.workDir, { recursive: true, mode: 0o700 });
    for (const name of await readdir(this.o.workDir)) {
      await this.o.host
        .removeDisk(join(this.o.workDir, name))
        .catch(() => rm(join(this.o.workDir, name), { recursive: true, force: true }));
    }
    await this.o.host.reconcile();
    for (const name of await readdir(this.o.markersDir)) {
      const m = /^(.+)\.running$/.exec(name);
      if (!m) continue;
      const id = m[1]!;
      const reason = `the build was interrupted: the aenv server on node ${this.o.nodeName} stopped while it ran; start a new build`;
      try {
        const rec = await this.o.repository.find(id);
        if (
          rec &&
          !rec.committed &&
          rec.source.kind === 'template' &&
          (rec.source.build.status === 'building' || rec.source.build.status === 'waiting')
        ) {
          await this.o.repository.update(id, (r) => {
            if (r.source.kind === 'template') {
              r.source.build = {
                ...r.source.build,
                status: 'error',
                finishedAt: new Date().toISOString(),
                error: { message: reason },
              };
            }
          });
          await this.o.logs.appendStored(id, { level: 'error', message: reason });
          this.log.warn({ templateId: id }, 'template build interrupted by a restart marked as failed');
        }
      } catch (err) {
        this.log.error({ err, templateId: id }, 'could not mark an interrupted build as failed');
        continue;
      }
      await rm(join(this.o.markersDir, name), { force: true });
    }
  }

  isActive(id: string): boolean {
    return this.jobs.has(id);
  }

  /** Builds running or queued here now. */
  activeIds(): Set<string> {
    return new Set(this.jobs.keys());
  }

  /** Files hashes a running or queued build still copies from. */
  filesInUse(): Set<string> {
    const keep = new Set<string>();
    for (const j of this.jobs.values())
      for (const s of j.spec.steps) if (s.kind === 'copy') keep.add(s.filesHash);
    return keep;
  }

  /**
   * Validates a build request, moves the record from waiting to building and queues the build.
   * Throws InvalidArgument/InvalidState DomainErrors for bad requests.
   */
  async start(templateId: string, body: unknown): Promise<void> {
    if (this.closed) throw shuttingDown();
    const spec = parseBuildSpec(body, {
      defaultImage: this.o.defaultImage,
      uploaded: (h) => this.o.files.hasSync(h),
    });
    if (spec.base.kind === 'image') {
      try {
        this.o.images.resolve(spec.base.ref);
      } catch (e) {
        throw invalidArgument(`invalid fromImage ${JSON.stringify(spec.base.ref)}: ${errorMessage(e)}`, e);
      }
    } else {
      const parent = await this.findTemplate(spec.base.ref);
      if (!parent) throw invalidArgument(`fromTemplate '${spec.base.ref}' not found`);
      if (!parent.committed) throw invalidState(`fromTemplate '${spec.base.ref}' is not ready`);
      if (parent.id === templateId) throw invalidArgument('a template cannot be built from itself');
    }
    // The marker first: a crash right after the status change must still find this build at startup.
    await writeFile(this.marker(templateId), `${new Date().toISOString()}\n`, { mode: 0o600 });
    try {
      await this.o.repository.update(templateId, (r) => {
        if (r.source.kind !== 'template')
          throw invalidArgument(`${templateId} is a snapshot, not a template build`);
        if (r.committed || r.source.build.status !== 'waiting') {
          throw invalidState(
            `template ${templateId} was already built (build status: ${r.committed ? 'ready' : r.source.build.status})`,
          );
        }
        r.source.build = { status: 'building', startedAt: new Date().toISOString() };
      });
    } catch (e) {
      // (a running build of the same template keeps its marker)
      if (!this.jobs.has(templateId)) await rm(this.marker(templateId), { force: true });
      throw e;
    }
    const abort = new AbortController();
    const job: Job = { id: templateId, spec, abort, done: Promise.resolve() };
    this.jobs.set(templateId, job);
    const log = this.o.logs.open(templateId);
    job.done = this.enqueue(job, log);
  }

  private async findTemplate(ref: string): Promise<SnapshotRecord | undefined> {
    for (const name of candidateNames(ref)) {
      try {
        const r = await this.o.repository.find(name);
        if (r && r.source.kind !== 'paused') return r;
      } catch (e) {
        if (isRepositoryError(e, 'InvalidRequest')) continue;
        throw e;
      }
    }
    return undefined;
  }

  private async enqueue(job: Job, log: BuildLog): Promise<void> {
    if (this.running >= this.o.maxConcurrentBuilds) {
      log.add(
        'info',
        `waiting for a build slot (${this.running} of ${this.o.maxConcurrentBuilds} builds running)`,
        'base',
      );
      await new Promise<void>((resolve) => this.queue.push(resolve));
    }
    this.running++;
    // The deadline runs from the moment the build gets its slot; aborting ends it like a delete does (error,
    // build sandbox removed), with this reason.
    const secs = Math.round(this.o.maxBuildMs / 1000);
    const deadline = setTimeout(
      () =>
        job.abort.abort(
          new Error(`the build exceeded its deadline of ${secs} s (template_build.max_build_secs)`),
        ),
      this.o.maxBuildMs,
    );
    try {
      await this.build(job, log);
    } finally {
      clearTimeout(deadline);
      this.running--;
      this.queue.shift()?.();
      this.jobs.delete(job.id);
      await this.o.logs.finish(job.id);
      await rm(this.marker(job.id), { force: true });
      this.o.onFinished?.(job.id);
    }
  }

  private async build(job: Job, log: BuildLog): Promise<void> {
    const { spec, id } = job;
    const signal = job.abort.signal;
    const started = Date.now();
    let sandbox: BuildSandbox | undefined;
    let stage = 'base';
    const disk = join(this.o.workDir, `${id}-disk`);
    const parentDisk = join(this.o.workDir, `${id}-parent`);
    try {
      signal.throwIfAborted();
      log.add('info', `building template ${id} on node ${this.o.nodeName}`, 'base');
      const base = await this.resolveBase(spec, log, signal, parentDisk);
      const n = spec.steps.length;
      const keys = cacheKeys(
        base.key,
        spec.steps.map((s) => s.keyText),
      );
      const readLimit = firstForcedStep(spec);
      const hit = readLimit > 0 ? await this.o.cache.longestPrefix(keys, readLimit) : undefined;
      if (spec.force) log.add('info', 'cache: skipped (force)', 'base');
      const state = hit ? cloneState(hit.state) : cloneState(base.state);
      const from = hit?.steps ?? 0;
      for (let i = 0; i < from; i++) {
        const s = spec.steps[i]!;
        log.add('info', `CACHED [${s.index}/${n}] ${s.label}`, String(s.index));
      }
      if (hit)
        log.add('info', `cache: reused the result of ${from} of ${n} step${n === 1 ? '' : 's'}`, 'base');

      const startCmd = spec.startCmd ?? base.startup?.startCmd;
      const readyCmd = spec.startCmd
        ? spec.readyCmd
        : (spec.readyCmd ?? (base.startup?.readyCmd || undefined));
      const rec = await this.o.repository.get(id);
      const resources = { cpuCount: rec.resources.cpuCount, memoryMB: rec.resources.memoryMB };
      // The init's PATH as the build starts (launches of the template get the same).
      const path = state.env.PATH;
      // Every step cached and nothing to start: the cached disk is the template, no sandbox needed.
      let diskBeforeStart = hit && from === n && !startCmd && !readyCmd ? hit.dir : undefined;
      if (!diskBeforeStart) {
        const sbId = this.o.newSandboxId();
        const diskSource = hit?.dir ?? base.disk;
        sandbox = await this.o.host.start({
          id: sbId,
          templateId: id,
          image: base.image,
          ...(diskSource ? { diskSource } : {}),
          resources,
          path,
        });
        log.add('debug', `build sandbox ${sbId} started${hit ? ' on the cached disk' : ''}`, 'base');
        const shell = (await sandbox.envd.stat('/bin/bash')) ? '/bin/bash' : '/bin/sh';
        if (shell !== '/bin/bash')
          log.add('warn', 'the image has no /bin/bash: commands run with /bin/sh', 'base');
        const runner = new StepRunner({ envd: sandbox.envd, log, files: this.o.files, signal }, shell);
        if (!hit) await this.ensureDefaultUser(runner, state, log);

        for (let i = from; i < n; i++) {
          const step = spec.steps[i]!;
          stage = String(step.index);
          signal.throwIfAborted();
          log.add('info', `[${step.index}/${n}] ${step.label}`, stage);
          const t0 = Date.now();
          await runner.run(step, state);
          log.add('debug', `[${step.index}/${n}] done in ${Date.now() - t0} ms`, stage);
          if (changesDisk(step) || i === n - 1) {
            const sb = sandbox;
            const snapshotState = cloneState(state);
            await this.o.cache
              .save(keys[i + 1]!, i + 1, snapshotState, (dest) => this.o.host.snapshotDisk(sb, dest))
              .catch((err: unknown) =>
                log.add(
                  'warn',
                  `cache: could not save the result of step ${step.index}: ${errorMessage(err)}`,
                  stage,
                ),
              );
          }
        }
        stage = 'finalize';
        await this.o.host.snapshotDisk(sandbox, disk);
        diskBeforeStart = disk;
      }
      stage = 'finalize';

      const context = contextOf(state);
      if ((startCmd || readyCmd) && sandbox) {
        log.add('info', startCmd ? `start command: ${startCmd}` : `ready command: ${readyCmd}`, 'finalize');
        const out = {
          start: log.lineWriter('info', 'finalize', '[start] '),
          ready: log.lineWriter('debug', 'finalize', '[ready] '),
        };
        await runStartup({
          envd: sandbox.envd,
          startup: { ...(startCmd ? { startCmd } : {}), ...(readyCmd ? { readyCmd } : {}), context },
          onOutput: (source, o) => out[source].write(o.data),
          onProgress: (m) => log.add('info', m, 'finalize'),
          signal,
          ...this.o.startup,
        });
        out.start.flush();
        out.ready.flush();
      }

      signal.throwIfAborted();
      const req = {
        templateRecordId: id,
        context,
        ...(startCmd ? { startup: { startCmd, readyCmd: readyCmd ?? '' } } : {}),
      };
      // A capture without memory takes the disk as it was before the start command ran (no pid or lock files of
      // a start command that is not running); a memory capture takes the disk at the instant of its checkpoint.
      const before = diskBeforeStart;
      const origin = sandbox ? { sandbox } : { image: base.image, path };
      const captureDisk = () => this.o.host.captureDisk(req, before, origin);
      if (startCmd && sandbox) {
        // The captured envd keeps the template's env, user and workdir; a launch's /init adds its own env to it.
        await this.o.host.init(sandbox, context);
        log.add('info', 'capturing the template with its running start command (memory + disk)', 'finalize');
        try {
          await this.o.host.captureMemory(sandbox, req);
        } catch (e) {
          if (signal.aborted) throw e;
          log.add(
            'warn',
            `memory capture failed (${errorMessage(e)}); captured the disk only: sandboxes from this template will not have the start command running`,
            'finalize',
          );
          await captureDisk();
        }
      } else {
        log.add('info', 'capturing the template (disk)', 'finalize');
        await captureDisk();
      }
      log.add(
        'info',
        `template ${id} is ready (${((Date.now() - started) / 1000).toFixed(1)} s)`,
        'finalize',
      );
    } catch (e) {
      const message = signal.aborted
        ? String((signal.reason as Error | undefined)?.message ?? SHUTDOWN_REASON)
        : e instanceof StepError || e instanceof StartupError || e instanceof DomainError
          ? e.message
          : errorMessage(e);
      const step = e instanceof StepError ? e.step : stage;
      log.add('error', `build failed: ${message}`, step);
      this.log.warn({ templateId: id, step, err: message }, 'template build failed');
      await this.o.repository
        .update(id, (r) => {
          if (r.source.kind === 'template') {
            r.source.build = {
              ...r.source.build,
              status: 'error',
              finishedAt: new Date().toISOString(),
              error: { message, step },
            };
          }
        })
        .catch((err: unknown) => {
          // A template deleted during its build is gone; nothing to record.
          if (!isRepositoryError(err, 'NotFound'))
            this.log.error({ err, templateId: id }, 'could not record a failed build');
        });
    } finally {
      if (sandbox) {
        await this.o.host
          .destroy(sandbox)
          .catch((err: unknown) =>
            this.log.error({ err, buildSandbox: sandbox!.id }, 'could not remove a build sandbox'),
          );
      }
      for (const d of [disk, parentDisk]) {
        if (existsSync(d))
          await this.o.host.removeDisk(d).catch(() => rm(d, { recursive: true, force: true }));
      }
      await this.o.cache.evict().catch(() => {});
    }
  }

  /** E2B's default user `user` is created when the image lacks it; an image that cannot make users runs steps as root. */
  private async ensureDefaultUser(runner: StepRunner, state: BuildState, log: BuildLog): Promise<void> {
    if (state.user === 'root') return;
    try {
      await runner.ensureUser(state.user, 'base');
    } catch (e) {
      if (state.user !== E2B_DEFAULT_USER) throw e;
      log.add(
        'warn',
        `could not create the default user ${E2B_DEFAULT_USER} (${errorMessage(e)}); steps run as root`,
        'base',
      );
      state.user = 'root';
    }
  }

  private async resolveBase(
    spec: BuildSpec,
    log: BuildLog,
    signal: AbortSignal,
    diskDir: string,
  ): Promise<ResolvedBase> {
    if (spec.base.kind === 'image') {
      log.add('info', `FROM ${spec.base.ref}`, 'base');
      const image = await this.o.images.pull(spec.base.ref, {
        signal,
        ...(spec.base.credentials ? { credentials: spec.base.credentials } : {}),
      });
      log.add(
        'info',
        `image ${image.reference} (${image.manifestDigest}, ${image.layers.length} layers)`,
        'base',
      );
      return { image, state: stateFromImage(image), key: `image:${image.manifestDigest}` };
    }
    const parent = await this.findTemplate(spec.base.ref);
    const committed = parent?.committed;
    if (!parent || !committed) throw invalidState(`fromTemplate '${spec.base.ref}' is no longer available`);
    if (!committed.baseImage) throw invalidState(`fromTemplate '${spec.base.ref}' has no base image`);
    log.add('info', `FROM template ${parent.alias ?? parent.id} (${parent.id})`, 'base');
    if (committed.artifacts.memory) {
      log.add(
        'info',
        "the build starts on the base template's disk; its start command, if any, is started again",
        'base',
      );
    }
    const image = await this.o.images.pull(committed.baseImage.reference, { signal });
    if (image.manifestDigest !== committed.baseImage.manifestDigest) {
      throw invalidState(
        `the base image ${committed.baseImage.reference} of ${parent.alias ?? parent.id} is now ${image.manifestDigest}, not ${committed.baseImage.manifestDigest}: its disk does not fit any more`,
      );
    }
    const diskDigest = await this.o.host.unpackDisk(committed, diskDir, `fromTemplate '${spec.base.ref}'`);
    return {
      image,
      ...(diskDigest ? { disk: diskDir } : {}),
      state: stateFromContext(committed.context),
      key: `template:${parent.id}:${image.manifestDigest}:${diskDigest ?? 'no-disk'}`,
      ...(committed.startup ? { startup: committed.startup } : {}),
    };
  }

  /** `GET /templates/{id}/builds/{buildID}/status`. */
  async status(record: SnapshotRecord, q: LogQuery): Promise<BuildStatusView> {
    const recorded = record.source.kind === 'template' ? record.source.build.status : 'ready';
    // Committed (the record reads ready) but still finishing here: its last log lines are not written yet, and
    // the SDK stops reading logs once a terminal status brings no new entries.
    const status = recorded === 'ready' && this.jobs.has(record.id) ? 'building' : recorded;
    const all = await this.o.logs.read(record.id);
    const entries = selectEntries(all, q);
    const error = record.source.kind === 'template' ? record.source.build.error : undefined;
    return {
      templateID: record.id,
      buildID: record.id,
      status,
      logs: entries.map((e) => `${e.timestamp} ${e.message}`),
      logEntries: entries,
      ...(status === 'error'
        ? {
            reason: error
              ? { message: error.message, ...(error.step ? { step: error.step } : {}) }
              : { message: 'the build failed' },
          }
        : {}),
    };
  }

  /** Stops a running build (delete of its template); resolves when it has stopped. */
  async cancel(id: string, reason: string): Promise<void> {
    const job = this.jobs.get(id);
    if (!job) return;
    job.abort.abort(new Error(reason));
    await job.done;
  }

  /** Stops every build (server shutdown): they end `error`. */
  async close(): Promise<void> {
    this.closed = true;
    const jobs = [...this.jobs.values()];
    for (const j of jobs) j.abort.abort(new Error(SHUTDOWN_REASON));
    for (const release of this.queue.splice(0)) release();
    await Promise.all(jobs.map((j) => j.done.catch(() => {})));
  }
}
