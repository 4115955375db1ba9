// The node side of template builds (template/build-host.ts): build sandboxes come out of the sandbox factory like
// every other sandbox (held as `build:<id>`, denied all egress), and their captures go through the same capture
// code as snapshots, on the state the factory gave them. Build sandboxes are not orchestrator sandboxes: the API
// never lists them, and after a crash the startup reconcile removes their containers, slots and ranges.
import { mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { DomainError, EnvdRpcClient, ErrorKind, initEnvd } from '@aenv/protocol';
import type { CommandContext, SnapshotRecord } from '../snapshot/index.js';
import type {
  BuildSandbox,
  BuildSandboxSpec,
  DiskOrigin,
  TemplateBuildHost,
  TemplateCaptureRequest,
} from '../template/build-host.js';
import { captureRunning, publishDisk, type CaptureSubject } from './capture.js';
import { DISK_MEDIA_TYPE } from './capture-format.js';
import type { BackendContext } from './context.js';
import { extractArchive } from './disk-archive.js';
import type { AssembledSandbox } from './sandbox-factory.js';

const BUILD_PREFIX = 'build:';

export class TemplateBuilds implements TemplateBuildHost {
  private readonly running = new Map<string, AssembledSandbox>();

  constructor(private readonly ctx: BackendContext) {}

  private get o() {
    return this.ctx.o;
  }

  private assembled(sb: BuildSandbox): AssembledSandbox {
    const s = this.running.get(sb.id);
    if (!s) throw new Error(`build sandbox ${sb.id} is not running`);
    return s;
  }

  async start(spec: BuildSandboxSpec): Promise<BuildSandbox> {
    const f = this.ctx.factory;
    const s = await f.assemble({
      containerId: spec.id,
      rangeOwner: BUILD_PREFIX + spec.id,
      templateId: spec.templateId,
      resources: spec.resources,
      state: f.imageState(spec.image, spec.path),
      policy: { allowOut: [], denyOut: [], allowInternetAccess: null },
      leaseHolder: BUILD_PREFIX + spec.id,
      ...(spec.diskSource ? { from: { disk: spec.diskSource } } : {}),
      init: () => ({
        body: { envVars: {}, defaultUser: 'root', timestamp: new Date().toISOString() },
        credentials: { initKey: this.o.envdInitKey(spec.id) },
      }),
    });
    this.running.set(spec.id, s);
    return {
      id: spec.id,
      envd: new EnvdRpcClient({ baseUrl: `http://${s.slot.hostInteractionIp}:${this.o.envdPort}` }),
    };
  }

  async init(sb: BuildSandbox, ctx: CommandContext): Promise<void> {
    await initEnvd(
      this.assembled(sb).slot.hostInteractionIp,
      this.o.envdPort,
      {
        envVars: ctx.envVars,
        defaultUser: ctx.user ?? 'root',
        ...(ctx.workdir && ctx.workdir !== '/' ? { defaultWorkdir: ctx.workdir } : {}),
        timestamp: new Date().toISOString(),
      },
      { initKey: this.o.envdInitKey(sb.id) },
    );
  }

  async snapshotDisk(sb: BuildSandbox, dest: string): Promise<void> {
    await this.o.runtime.freeze(sb.id);
    try {
      await this.o.runtime.captureDisk(sb.id, dest);
    } finally {
      await this.o.runtime.thaw(sb.id);
    }
  }

  async destroy(sb: BuildSandbox): Promise<void> {
    const s = this.running.get(sb.id);
    if (!s) return;
    this.running.delete(sb.id);
    await this.o.runtime.destroy(s.containerId);
    this.o.idRanges.release(s.rangeOwner);
    await this.o.network.release(s.slot);
    if (s.leaseHolder) this.o.images.releaseLease(s.leaseHolder);
  }

  private subject(s: AssembledSandbox): CaptureSubject {
    return { containerId: s.containerId, state: s.state, sourceSandboxId: s.containerId, secure: false };
  }

  async captureMemory(sb: BuildSandbox, req: TemplateCaptureRequest): Promise<void> {
    const captured = await captureRunning(this.ctx, this.subject(this.assembled(sb)), {
      recordId: req.templateRecordId,
      context: req.context,
      ...(req.startup ? { startup: req.startup } : {}),
    });
    await captured.publish();
  }

  async captureDisk(req: TemplateCaptureRequest, disk: string, origin: DiskOrigin): Promise<void> {
    const subject: CaptureSubject =
      'sandbox' in origin
        ? this.subject(this.assembled(origin.sandbox))
        : {
            containerId: '',
            state: this.ctx.factory.imageState(origin.image, origin.path),
            sourceSandboxId: '',
            secure: false,
          };
    const b = this.o.templateBuilds;
    await publishDisk(
      this.ctx,
      subject,
      {
        recordId: req.templateRecordId,
        context: req.context,
        ...(req.startup ? { startup: req.startup } : {}),
      },
      disk,
      b.workDir,
      b.diskCaptureVersions,
    );
  }

  async unpackDisk(
    committed: NonNullable<SnapshotRecord['committed']>,
    dest: string,
    what: string,
  ): Promise<string | undefined> {
    const [layer, ...more] = committed.layers;
    if (more.length > 0 || (layer && layer.mediaType !== DISK_MEDIA_TYPE)) {
      throw new DomainError(ErrorKind.Unsupported, `${what} has a disk format this node cannot build on`);
    }
    if (!layer) return undefined;
    await extractArchive(await this.o.repository.fetch(layer), this.diskFilesDir(dest), layer);
    return layer.digest;
  }

  removeDisk(path: string): Promise<void> {
    return this.o.runtime.removeDisk(path);
  }

  diskFilesDir(disk: string): string {
    return this.o.runtime.diskFilesDir(disk);
  }

  async reconcile(): Promise<void> {
    for (const lease of this.o.images.listLeases()) {
      if (lease.holder.startsWith(BUILD_PREFIX)) this.o.images.releaseLease(lease.holder);
    }
    const work = this.o.templateBuilds.workDir;
    await mkdir(work, { recursive: true, mode: 0o700 });
    for (const name of await readdir(work)) await rm(join(work, name), { recursive: true, force: true });
  }
}
