import type { AenvConfig } from '@aenv/config';
import type { FastifyInstance } from 'fastify';
import type { SandboxEventStore } from '../events/sandbox-events.js';
import type { ImageService } from '../image/index.js';
import type { NodeIdentity } from '../identity/index.js';
import {
  UpstreamResolver,
  egressProxyRefusedRanges,
  parseNetworkPolicy,
  refuseEgressProxyIn,
  refuseUnknownSecrets,
  refuseUnresolvableEgressProxy,
} from '../network/index.js';
import type { HostMetricsSampler } from '../observability/host-metrics.js';
import type { SandboxObservability } from '../observability/sandbox-observability.js';
import type { Orchestrator } from '../orchestrator/orchestrator.js';
import type { SandboxTokenIssuer } from '../secrets/index.js';
import type { CommittedSnapshot, SnapshotRepository } from '../snapshot/index.js';
import type { StateDb } from '../state/db.js';
import { coldLaunchable } from '../template/cold-image.js';
import { coldDrivesOf } from '../backend/drives.js';
import { captureVolumeMounts } from '../backend/capture-format.js';
import type { TemplateService } from '../template/index.js';
import type { Logger } from '../util/log.js';
import type { Registry } from 'prom-client';
import { AdmissionControl, admissionLimitsFrom, registerAdmission } from './admission.js';
import { registerServerTiming } from './server-timing.js';
import { IdempotencyLayer } from './idempotency.js';
import { IdempotencyStore } from './idempotency-store.js';
import { registerEventRoutes } from './routes/events.js';
import { registerHealthRoutes } from './routes/health.js';
import { registerLogRoutes } from './routes/logs.js';
import { registerMetricsRoutes } from './routes/metrics.js';
import { registerNodeRoutes } from './routes/nodes.js';
import { registerNodeDrainRoute } from './routes/node-drain.js';
import { registerVolumeRoutes } from './routes/volumes.js';
import { registerWebhookRoutes } from './routes/webhooks.js';
import { registerSecretRoutes } from './routes/secrets.js';
import { secretNames, type Secrets } from '../secrets/secrets-api.js';
import type { startWebhooks } from '../events/webhooks.js';
import type { VolumeService } from '../volume/index.js';
import { registerSandboxRoutes } from './routes/sandboxes.js';
import { registerSnapshotRoutes } from './routes/snapshots.js';
import { registerUnheldSandboxesRoute, type UnheldRouteDeps } from './routes/unheld-sandboxes.js';
import { registerTemplateRoutes } from './routes/templates.js';
import { localTeamId, registerTeamRoutes } from './routes/teams.js';

/** A cold launchable's record (template/cold-image.ts). */
type CommittedRecord = { committed: CommittedSnapshot };

/**
 * What the control plane puts in front of the orchestrator before the routes exist: admission limits (they
 * also bound what a template may ask for) and idempotency keys (they choose the id of a create).
 */
export function startApiGuards(
  config: AenvConfig,
  deps: { db: StateDb; apiKey: string; logger: Logger },
): { admission: AdmissionControl; idempotency: IdempotencyLayer } {
  const admission = new AdmissionControl(admissionLimitsFrom(config));
  const idempotency = new IdempotencyLayer(
    new IdempotencyStore(deps.db, {
      team: localTeamId(deps.apiKey),
      retentionMs: config.api.idempotency_retention_secs * 1000,
      maxKeys: config.api.idempotency_max_keys,
    }),
    deps.logger.child({ component: 'idempotency' }),
  );
  return { admission, idempotency };
}

export interface ControlPlaneDeps {
  admission: AdmissionControl;
  idempotency: IdempotencyLayer;
  apiKey: string;
  identity: NodeIdentity;
  orchestrator: Orchestrator;
  tokens: SandboxTokenIssuer;
  images: ImageService;
  repository: SnapshotRepository;
  templates: TemplateService;
  observability: SandboxObservability;
  events: SandboxEventStore;
  hostMetrics: HostMetricsSampler;
  registry: Registry;
  envdVersion: string;
  tools: { version: string };
  runtime: { driver: { virtualizationMode: string } };
  /** A deleted template's local copy goes too. */
  backend: { removeLocalSnapshot(templateId: string): Promise<void> };
  volumes: VolumeService;
  webhooks: Pick<ReturnType<typeof startWebhooks>, 'store' | 'definitions' | 'policy' | 'maxWebhooks'>;
  /** `POST /nodes/{id}/drain`: undefined when the node has no shared repository to drain into. */
  drain?: () => void;
  /** `/secrets`: absent, the routes are not registered (404). */
  secrets?: Secrets;
  /** The paused sandboxes no node holds (a shared repository); absent: there are none this node could know of. */
  unheld?: UnheldRouteDeps['unheld'];
}

/** Every control-plane route of the node, with its hooks, on the front door's Fastify app. */
export function registerControlPlane(app: FastifyInstance, config: AenvConfig, deps: ControlPlaneDeps): void {
  const { admission, orchestrator, repository, templates, secrets } = deps;
  const envdVersion = deps.envdVersion;
  const runtimeVersions = { envd: envdVersion, tools: deps.tools.version };
  const defaults = {
    cpuCount: config.machine.vcpu_count,
    memoryMB: config.machine.mem_size_mib,
    diskSizeMB: config.runtime.default_disk_size_mb,
  };
  const teamId = localTeamId(deps.apiKey);
  const domain = config.sandbox_proxy.domains[0];
  registerAdmission(app, admission);
  deps.idempotency.register(app);
  // Last: its handler wraps the two above, so the phases and the total include admission and idempotency.
  registerServerTiming(app);
  registerHealthRoutes(app, deps.registry);
  registerNodeRoutes(app, {
    enabled: config.observability.enabled,
    identity: deps.identity,
    host: deps.hostMetrics,
    counters: () => orchestrator.counters(),
    drainProgress: () => orchestrator.drainProgress(),
  });
  const drain = deps.drain;
  registerNodeDrainRoute(app, {
    nodeId: deps.identity.nodeId,
    ...(drain
      ? {}
      : {
          unavailable:
            'draining needs a shared repository: [snapshot].repository_backend = "oss", or "posix_fs" on a shared directory with [cluster].scheduler_endpoint set (docs/cluster.md#draining)',
        }),
    start: () => drain?.(),
    progress: () => orchestrator.drainProgress(),
  });
  const proxyRanges = egressProxyRefusedRanges({
    alwaysDeniedCidrs: config.network.egress.always_denied_cidrs,
    internalCidrs: [config.network.internal.host_interaction_cidr, config.network.internal.veth_cidr],
  });
  // The same resolvers and refused ranges the egress proxy dials with (network/egress/socks.ts).
  const proxyNames = new UpstreamResolver({
    servers: config.network.egress.resolvers,
    deniedCidrs: proxyRanges,
  });
  registerSandboxRoutes(app, {
    orchestrator,
    volumes: deps.volumes,
    tokens: deps.tokens,
    parsePolicy: (input) => refuseEgressProxyIn(parseNetworkPolicy(input), proxyRanges),
    checkPolicy: async (policy) => {
      await refuseUnresolvableEgressProxy(policy, (name) => proxyNames.resolve(name));
      // Without /secrets on this node no secret exists: every placeholder is refused.
      await refuseUnknownSecrets(policy, async () => (secrets ? secretNames(secrets) : new Set()));
    },
    envdPort: config.tools.control_plane_port,
    ...(domain ? { domain } : {}),
    customExtensionConfigured: Boolean(config.custom_extension.url),
    cold: {
      defaults: { cpuCount: defaults.cpuCount, memoryMB: defaults.memoryMB },
      launchable: async (image, resources, drives) => {
        // The defaults too must fit the node's limits (the request's own values were checked on admission),
        // and so must the disk an image's size gives.
        admission.checkResources(resources, 'cold sandbox request');
        const launchable = await coldLaunchable(
          {
            images: deps.images,
            runtimeVersions,
            virtualizationMode: deps.runtime.driver.virtualizationMode,
            envdVersion,
          },
          image,
          resources,
          drives,
        );
        admission.checkResources(launchable.resources, 'cold sandbox request');
        // Writable drives raise the sandbox's disk limit (docs/volumes.md "Attached drives"): the node's
        // limit bounds the whole of it.
        const pulled = coldDrivesOf((launchable.record as CommittedRecord).committed.extra);
        const drivesMB = pulled.reduce((sum, d) => sum + (d.sizeMB ?? 0), 0);
        if (drivesMB > 0)
          admission.checkResources(
            { diskSizeMB: launchable.resources.diskSizeMB + drivesMB },
            'cold sandbox request (with its writable attached drives)',
          );
        return launchable;
      },
    },
  });
  registerTemplateRoutes(app, {
    repository,
    builder: templates.builder,
    files: templates.files,
    logs: templates.logs,
    sandboxesUsing: (id) => orchestrator.all().filter((r) => r.templateId === id).length,
    defaults,
    envdVersion,
    onDeleted: (id) => deps.backend.removeLocalSnapshot(id),
    teamId,
    volumeMountsOf: captureVolumeMounts,
  });
  registerUnheldSandboxesRoute(app, {
    ...(deps.unheld ? { unheld: deps.unheld } : {}),
    expiry: (r) => orchestrator.expiryOf(r),
  });
  registerSnapshotRoutes(app, { orchestrator, repository });
  registerMetricsRoutes(app, deps.observability.metricsRoutes());
  registerLogRoutes(app, deps.observability.logRoutes());
  registerEventRoutes(app, deps.events);
  registerWebhookRoutes(app, { ...deps.webhooks, teamId });
  registerTeamRoutes(app, { apiKey: deps.apiKey });
  registerVolumeRoutes(app, { volumes: deps.volumes });
  if (secrets) registerSecretRoutes(app, { secrets });
}
