import { join } from 'node:path';
import type { AenvConfig } from '@aenv/config';
import { ENVD_VERSION as envdVersion, newSandboxId } from '@aenv/protocol';
import { withResourceLimits } from '../api/admission.js';
import { idempotencyMigrations } from '../api/idempotency-store.js';
import { localTeamId } from '../api/routes/teams.js';
import { registerControlPlane, startApiGuards } from '../api/start.js';
import { sharesPausedSandboxes, startBackend } from '../backend/start.js';
import type { HeartbeatReporter } from '../cluster/heartbeat-reporter.js';
import { startSchedulerReport, startUnheldRetention } from '../cluster/start.js';
import { findUnheldPauses } from '../backend/unheld-pauses.js';
import type { LifecycleEvent } from '../orchestrator/orchestrator.js';
import { SandboxEventStore, sandboxEventMigrations } from '../events/sandbox-events.js';
import { webhookMigrations } from '../events/webhook-store.js';
import { startWebhooks } from '../events/webhooks.js';
import { VolumeContentEndpoint } from '../api/volume-content.js';
import { volumeMigrations } from '../volume/index.js';
import { startVolumes } from '../volume/start.js';
import { captureExtensionParams, captureNetwork, captureVolumeMounts } from '../backend/capture-format.js';
import { startExtension } from '../extension/start.js';
import { startFrontDoor, type FrontDoor } from '../front-door/start.js';
import { resolveNodeIdentity } from '../identity/index.js';
import { imageMigrations } from '../image/index.js';
import { startImages } from '../image/start.js';
import { startNetwork } from '../network/start.js';
import { HostMetricsSampler } from '../observability/host-metrics.js';
import { ServerMetrics } from '../observability/metrics.js';
import { sandboxLogMigrations } from '../observability/sandbox-log-store.js';
import { startSandboxObservability } from '../observability/start.js';
import { startOrchestrator } from '../orchestrator/start.js';
import { SandboxStore, orchestratorMigrations } from '../orchestrator/store.js';
import { createRuntime, idRangeMigrations } from '../runtime/index.js';
import { startSecrets } from '../secrets/start.js';
import { startSnapshotRepository } from '../snapshot/start.js';
import { openStateDb } from '../state/db.js';
import { TemplateCatalog } from '../template/catalog.js';
import { dropSecretsFromEnvironment, hostToolEnv } from '../util/exec.js';
import { startLauncher } from '../util/launcher.js';
import type { Logger } from '../util/log.js';
import { gitCommit, startNodeHost } from './node-host.js';
import { runShutdown, shutdownSteps } from './shutdown.js';
import { startTemplates } from './start-templates.js';
import { startTools } from '../tools/start.js';
import { loadOrCreateNodeCa } from '../network/egress/node-ca.js';
import { SecretStore, secretMigrations } from '../secrets/secret-store.js';
import { resolveSecretsKey } from '../secrets/secrets-key.js';
import { localSecrets, type Secrets } from '../secrets/secrets-api.js';
import { SharedSecrets } from './shared-secrets.js';

const MIGRATIONS = [
  ...[
    orchestratorMigrations,
    imageMigrations,
    sandboxLogMigrations,
    sandboxEventMigrations,
    webhookMigrations,
  ],
  ...[idRangeMigrations, idempotencyMigrations, volumeMigrations, secretMigrations],
].flat();

/**
 * The composition root: every subsystem of a node started in order, each from its config section and the
 * subsystems it needs; `close()` stops them in the order of ./shutdown.ts.
 */
export async function startNode(config: AenvConfig, logger: Logger, repoRoot: string) {
  const host = await startNodeHost(config, logger);
  const db = openStateDb(join(config.home_path, 'state.db'), MIGRATIONS);
  const store = new SandboxStore(db);
  const { apiKey, tokens } = startSecrets(config, { stored: store.loadAll().records, logger });
  dropSecretsFromEnvironment(); // read once: no host command started from here on inherits them
  // Host commands start from a small process from here on, while this one is still small (util/launcher.ts).
  const launcher = startLauncher(hostToolEnv());
  const secretsKey = resolveSecretsKey({
    homePath: config.home_path,
    explicitKey: config.sandbox.secrets_encryption_key,
    schedulerEndpoint: config.cluster.scheduler_endpoint,
  });
  for (const w of secretsKey.warnings) logger.warn(w);
  // network.rules, sandbox trust: the cluster's CA when the secrets key is the cluster's (sandboxes move).
  const egressCa = await loadOrCreateNodeCa({
    homePath: config.home_path,
    ...(secretsKey.source === 'config' ? { clusterKey: secretsKey.key } : {}),
  });
  const secretStore = new SecretStore(db, secretsKey.key); // /secrets, filled in at egress
  let secrets: Secrets = localSecrets(secretStore); // the shared repository's copy once it is open
  const { identity, warnings } = resolveNodeIdentity(config.node_identity, {
    commit: await gitCommit(repoRoot),
  });
  for (const w of warnings) logger.warn(w);
  const metrics = new ServerMetrics();
  const [registry, nodeName] = [metrics.registry, identity.nodeId];
  const core = { db, tokens, logger, registry, envdVersion, apiKey, nodeName };
  const tools = await startTools(config, logger);
  const images = await startImages(config, core);
  const network = startNetwork(config, { ...core, egressCa, secretValue: (n) => secrets.valueOf(n) });
  const runtime = await createRuntime(config, {
    db,
    logger: logger.child({ component: 'runtime' }),
    trustedCaPem: egressCa.certPem,
  });
  const repository = await startSnapshotRepository(config, core);
  if (sharesPausedSandboxes(config))
    secrets = new SharedSecrets(secretStore, repository.repository, logger.child({ component: 'secrets' }));
  const volumes = await startVolumes(config, {
    db,
    disks: runtime.volumeDisks,
    apiKey,
    nodeId: identity.nodeId,
    logger,
  });
  const parts = {
    ...core,
    tools,
    runtime,
    images: images.images,
    network: network.network,
    repository: repository.repository,
  };
  const backend = startBackend(config, {
    ...parts,
    volumeDir: (id) => volumes.mountDir(id),
    volumes,
  });
  const sandboxes = { ...parts, backend: backend.backend };
  const obs = startSandboxObservability(config, sandboxes);
  const catalog = new TemplateCatalog({
    ...parts,
    virtualizationMode: runtime.driver.virtualizationMode,
    extensionParamsOf: captureExtensionParams,
    volumeMountsOf: captureVolumeMounts,
    networkOf: captureNetwork,
  });
  const { admission, idempotency } = startApiGuards(config, core);
  const extension = startExtension(config.custom_extension, core);
  const webhooks = startWebhooks(
    db,
    config,
    logger.child({ component: 'webhooks' }),
    sharesPausedSandboxes(config) ? repository.repository : undefined,
  );
  const events = new SandboxEventStore(db, { teamId: localTeamId(apiKey), onEvent: webhooks.enqueue });
  const late: { frontDoor?: FrontDoor; reporter?: HeartbeatReporter } = {}; // told of the orchestrator's work
  const onLifecycle = (e: LifecycleEvent) => {
    [events, obs.observability, late.reporter].forEach((l) => l?.onLifecycle(e));
    volumes.noteSandboxesChanged(); // leases on a shared volume directory follow the sandboxes
    if (e.event === 'created' || e.event === 'forked') backend.backend.noteStarted(e.sandboxId);
  };
  const orchestrator = await startOrchestrator(config.orchestrator, {
    ...sandboxes,
    store,
    ...(extension ? { extension } : {}),
    captureRoot: runtime.driver.captureRoot,
    templates: withResourceLimits(catalog, admission),
    newId: () => idempotency.sandboxChosen(newSandboxId()),
    onInstanceStopped: (id) => late.frontDoor?.proxy.closeInstance(id),
    onLifecycle,
    observe: (operation, fn, stage) => metrics.observe(operation, fn, stage),
  });
  const orch = orchestrator.orchestrator;
  metrics.trackSandboxStates(() => orch.stateCounts());
  volumes.setUsers(() => {
    const users = new Map<string, string[]>();
    for (const r of orch.all())
      for (const m of r.volumeMounts ?? []) users.set(m.volumeId, [...(users.get(m.volumeId) ?? []), r.id]);
    return users;
  });
  // A paused sandbox another node took over keeps this node's copy (and its volume lease) until the orchestrator
  // notices (every 10 s); its drop is a lifecycle event, so the leases follow.
  volumes.startLeaseRefresh();
  const movedAway = await orch.dropMovedAway();
  if (movedAway > 0)
    logger.info({ sandboxes: movedAway }, 'dropped paused sandboxes that moved to other nodes');
  idempotency.recover((id) => orch.find(id) !== undefined);
  await obs.observability.start(orch);
  const templates = await startTemplates(config, { ...sandboxes, catalog });
  const hostMetrics = new HostMetricsSampler();
  late.frontDoor = await startFrontDoor(config, {
    ...parts,
    metrics,
    orchestrator: orch,
    templateFiles: templates.files,
    volumeContent: new VolumeContentEndpoint(volumes, apiKey, logger.child({ component: 'volume-content' })),
    controlPlane: (app) =>
      registerControlPlane(app, config, {
        ...sandboxes,
        admission,
        idempotency,
        identity,
        orchestrator: orch,
        templates,
        events,
        hostMetrics,
        observability: obs.observability,
        volumes,
        webhooks,
        secrets,
        ...(sharesPausedSandboxes(config)
          ? {
              drain: () => {
                void late.reporter?.drain();
                void orch.drain(identity.nodeId, {
                  reportRoster: () => late.reporter?.report() ?? Promise.resolve(),
                });
              },
              unheld: async (listed) =>
                (await findUnheldPauses(repository.repository, listed, logger)).unheld.map((p) => p.sandbox),
            }
          : {}),
      }),
  });
  logger.info({ addr: config.api_addr, node: identity.nodeId }, 'aenv server listening');
  orch.startEviction();
  webhooks.start();
  secrets.start();
  images.images.start();
  late.reporter = startSchedulerReport(config, { identity, orchestrator: orch, host: hostMetrics, logger });
  const unheldRetention = startUnheldRetention(config, {
    shares: sharesPausedSandboxes(config),
    nodeId: identity.nodeId,
    repository: repository.repository,
    onLifecycle,
    logger,
  });
  const steps = shutdownSteps({
    ...late,
    ...(unheldRetention ? { unheldRetention } : {}),
    frontDoor: late.frontDoor,
    templates,
    observability: obs,
    orchestrator,
    webhooks,
    secrets,
    ...(extension ? { extension } : {}),
    volumes,
    backend,
    network,
    runtime: runtime.driver,
    images,
    repository,
    ...(launcher ? { launcher } : {}),
    db,
    host,
  });
  return { close: () => runShutdown(steps, logger) };
}
