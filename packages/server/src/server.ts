import { mkdirSync, existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawn } from 'node:child_process';
import {
  ConfigError,
  containerModeNotice,
  loadConfig,
  type AenvConfig,
  type ConfigFlags,
} from '@aenv/config';
import { ENVD_VERSION, ensureToolsDir } from '@aenv/envd';
import { createLogger, type Logger } from './util/log.js';
import { installProcessGuards } from './util/process-guard.js';
import { dropSecretsFromEnvironment } from './util/exec.js';
import { newSandboxId } from '@aenv/protocol';
import { openStateDb, type StateDb } from './state/db.js';
import { lockNodeDirs } from './util/node-lock.js';
import { enforceNodeDirModes } from './util/node-modes.js';
import { makeReadOnlyForAll } from './util/private-tree.js';
import { filesystemBytes } from './util/disk-usage.js';
import { ServerMetrics } from './observability/metrics.js';
import { HostMetricsSampler } from './observability/host-metrics.js';
import {
  resolveApiKey,
  resolveAccessTokenSeed,
  resolveRecordSigningKey,
  SandboxTokenIssuer,
} from './secrets/index.js';
import { resolveNodeIdentity } from './identity/index.js';
import { ImageService, imageMigrations } from './image/index.js';
import { NetworkManager, parseNetworkPolicy } from './network/index.js';
import { createRuntime, idRangeMigrations, runtimeFactory, type ToolsMount } from './runtime/index.js';
import { createSnapshotRepository, type SnapshotRepository } from './snapshot/index.js';
import { signUnsignedAtStartup, unsignedReadMode } from './snapshot/unsigned-records.js';
import { ContainerBackend } from './backend/container-backend.js';
import { TemplateCatalog } from './template/catalog.js';
import { ensureBaseTemplate } from './template/base-template.js';
import { Orchestrator } from './orchestrator/orchestrator.js';
import { SandboxStore, orchestratorMigrations } from './orchestrator/store.js';
import { SandboxProxy } from './proxy/proxy.js';
import { OrchestratorDirectory } from './proxy/orchestrator-directory.js';
import { createHttpServer } from './front-door/http-server.js';
import { nodeDataPlanes } from './front-door/data-planes.js';
import {
  AdmissionControl,
  admissionLimitsFrom,
  registerAdmission,
  withResourceLimits,
} from './api/admission.js';
import { IdempotencyLayer } from './api/idempotency.js';
import { IdempotencyStore, idempotencyMigrations } from './api/idempotency-store.js';
import { registerHealthRoutes } from './api/routes/health.js';
import { registerNodeRoutes } from './api/routes/nodes.js';
import { registerSandboxRoutes } from './api/routes/sandboxes.js';
import { coldLaunchable } from './template/cold-image.js';
import { HookClient } from './extension/hook-client.js';
import { SandboxEventStore, sandboxEventMigrations } from './events/sandbox-events.js';
import { registerEventRoutes } from './api/routes/events.js';
import { registerSnapshotRoutes } from './api/routes/snapshots.js';
import { registerTemplateRoutes } from './api/routes/templates.js';
import { registerMetricsRoutes } from './api/routes/metrics.js';
import { registerLogRoutes } from './api/routes/logs.js';
import { localTeamId, registerTeamRoutes } from './api/routes/teams.js';
import { SandboxObservability } from './observability/sandbox-observability.js';
import { sandboxLogMigrations } from './observability/sandbox-log-store.js';
import { createTemplateService, uploadSecretFromApiKey } from './template/index.js';
import { TemplateUploadEndpoint } from './api/template-upload.js';
import { reporterSettings } from './cluster/reporter-settings.js';
import { startHeartbeatReporter, type HeartbeatReporter } from './cluster/heartbeat-reporter.js';

export interface RunServerOptions {
  configPath?: string;
  setupOnly: boolean;
  /** Log unhandled rejections and uncaught exceptions and keep running (the `aenv server` process). */
  processGuards?: boolean;
  flags?: Omit<ConfigFlags, 'config'>;
  env?: NodeJS.ProcessEnv;
}

const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** CAP_NET_ADMIN (12) and CAP_SYS_ADMIN (21) are what netns, nftables, mounts and the runtime driver need. */
async function missingCapabilities(): Promise<string[]> {
  const status = await readFile('/proc/self/status', 'utf8');
  const eff = BigInt(`0x${/^CapEff:\s+([0-9a-f]+)/m.exec(status)?.[1] ?? '0'}`);
  const missing: string[] = [];
  if (!(eff & (1n << 12n))) missing.push('CAP_NET_ADMIN');
  if (!(eff & (1n << 21n))) missing.push('CAP_SYS_ADMIN');
  return missing;
}

function runSetupScript(depsPath: string, logger: Logger): Promise<number> {
  const script = join(REPO_ROOT, 'scripts', 'setup-host.sh');
  if (!existsSync(script)) {
    logger.error({ script }, 'host setup script not found');
    return Promise.resolve(1);
  }
  return new Promise((resolve) => {
    const child = spawn(script, ['--deps-path', depsPath], { stdio: 'inherit' });
    child.on('close', (code) => resolve(code ?? 1));
    child.on('error', (err) => {
      logger.error({ err }, 'host setup failed to start');
      resolve(1);
    });
  });
}

async function gitCommit(): Promise<string> {
  try {
    const head = (await readFile(join(REPO_ROOT, '.git', 'HEAD'), 'utf8')).trim();
    if (!head.startsWith('ref: ')) return head.slice(0, 12);
    return (await readFile(join(REPO_ROOT, '.git', head.slice(5)), 'utf8')).trim().slice(0, 12);
  } catch {
    return 'unknown';
  }
}

async function prepareTools(config: AenvConfig, logger: Logger): Promise<ToolsMount> {
  if (config.runtime.tools_dir && existsSync(join(config.runtime.tools_dir, 'VERSION'))) {
    const version = (await readFile(join(config.runtime.tools_dir, 'VERSION'), 'utf8')).trim();
    return { dir: config.runtime.tools_dir, version };
  }
  return ensureToolsDir({ depsPath: config.deps_path, logger });
}

/** Everything a running node holds, in the order it was started (stopped in reverse). */
interface Node {
  config: AenvConfig;
  logger: Logger;
  db: StateDb;
  images: ImageService;
  network: NetworkManager;
  repository: SnapshotRepository;
  backend: ContainerBackend;
  orchestrator: Orchestrator;
  proxy: SandboxProxy;
  close(): Promise<void>;
}

async function startNode(config: AenvConfig, logger: Logger): Promise<Node> {
  const missing = await missingCapabilities();
  if (missing.length) throw new Error(`aenv server needs ${missing.join(' and ')} (run it as root)`);
  // Sandbox uids must traverse $AENV_HOME to their dirs (search only; secrets/ itself is 0700).
  mkdirSync(config.home_path, { recursive: true, mode: 0o711 });
  const nodeLock = await lockNodeDirs(config);
  const changedModes = await enforceNodeDirModes({
    home: config.home_path,
    runtime: config.runtime_path,
    deps: config.deps_path,
    sandboxes: join(config.home_path, 'sandboxes'),
    contentRoots: [config.image.cache.root_dir, join(config.home_path, 'template-work')],
  });
  if (changedModes)
    logger.info({ changed: changedModes }, 'made node files private (0700 dirs, owner-only files)');
  const db = openStateDb(join(config.home_path, 'state.db'), [
    ...orchestratorMigrations,
    ...imageMigrations,
    ...sandboxLogMigrations,
    ...sandboxEventMigrations,
    ...idRangeMigrations,
    ...idempotencyMigrations,
  ]);
  const store = new SandboxStore(db);
  const stored = store.loadAll().records;

  const apiKey = resolveApiKey({ homePath: config.home_path });
  logger.info({ source: apiKey.source, path: apiKey.path }, 'API key resolved');
  const seed = resolveAccessTokenSeed({
    homePath: config.home_path,
    explicitSeed: config.sandbox.access_token_hash_seed,
    hasTokenProtectedPersistedSandboxes: stored.some((r) => r.secure || !r.network.allowPublicTraffic),
    schedulerEndpoint: config.cluster.scheduler_endpoint,
  });
  for (const w of seed.warnings) logger.warn(w);
  const tokens = new SandboxTokenIssuer(seed.seed);
  // Read once; no host command or credential process started from here on inherits them.
  dropSecretsFromEnvironment();
  const { identity, warnings: idWarnings } = resolveNodeIdentity(config.node_identity, {
    commit: await gitCommit(),
  });
  for (const w of idWarnings) logger.warn(w);
  const metrics = new ServerMetrics();

  const tools = await prepareTools(config, logger);
  // Mounted read-only into every sandbox, so readable by every sandbox uid (it was built under umask 077).
  await makeReadOnlyForAll(tools.dir);
  logger.info({ dir: tools.dir, version: tools.version }, 'tools mount ready');

  const images = new ImageService({
    rootDir: config.image.cache.root_dir,
    db,
    resolver: {
      defaultImage: config.image.resolver.default_image,
      searchRegistries: config.image.resolver.search_registries,
      allowedRegistries: config.image.resolver.allowed_registries,
      convertStandardOci: config.image.resolver.convert_standard_oci,
      tryReferrersOverlaybdPrefixes: config.image.resolver.try_referrers_overlaybd_prefixes,
      localImageDirs: config.image.resolver.local_image_dirs,
    },
    limits: {
      maxLayerBytes: config.image.limits.max_layer_mb * 1024 ** 2,
      maxImageBytes: config.image.limits.max_image_mb * 1024 ** 2,
      maxLayerEntries: config.image.limits.max_layer_entries,
    },
    gc: {
      enabled: config.image.cache.gc.enabled,
      intervalSecs: config.image.cache.gc.interval_secs,
      minAgeSecs: config.image.cache.gc.min_age_secs,
      highWatermarkRatio: config.image.cache.gc.high_watermark_ratio,
      lowWatermarkRatio: config.image.cache.gc.low_watermark_ratio,
    },
    capacityGb: config.image.cache.capacity_gb,
    insecureRegistries: config.image.resolver.insecure_registries,
    registryEndpoints: Object.fromEntries(
      config.image.resolver.registry_endpoints.map((e) => [
        e.slice(0, e.indexOf('=')),
        e.slice(e.indexOf('=') + 1),
      ]),
    ),
    uidShift: config.runtime.uid_map_host_start,
    uidRangeSize: config.runtime.uid_map_size,
    logger: logger.child({ component: 'images' }),
    metricsRegistry: metrics.registry,
  });
  await images.init();

  const network = new NetworkManager({
    runtimePath: config.runtime_path,
    internal: {
      hostInteractionCidr: config.network.internal.host_interaction_cidr,
      vethCidr: config.network.internal.veth_cidr,
    },
    egress: { alwaysDeniedCidrs: config.network.egress.always_denied_cidrs },
    nameserver: config.network.dns.nameserver,
    pool: {
      lowWatermark: config.pool.low_watermark,
      highWatermark: config.pool.high_watermark,
      maintenanceEnabled: config.pool.network.maintenance_enabled,
      startupPrewarm: config.pool.network.startup_prewarm,
      enabled: config.pool.network.enabled,
    },
    controlPlanePort: config.tools.control_plane_port,
    namePrefix: config.resource_prefix,
    logger: logger.child({ component: 'network' }),
    metricsRegistry: metrics.registry,
  });

  const { driver: runtime, ...runtimeHost } = await createRuntime(config, {
    db,
    logger: logger.child({ component: 'runtime' }),
  });
  const idRanges = runtimeHost.idRanges;

  const signingKey = resolveRecordSigningKey({
    homePath: config.home_path,
    explicitSecret: config.snapshot.record_signing_secret,
    sharedRepository: config.snapshot.repository_backend === 'oss',
  });
  for (const w of signingKey.warnings) logger.warn(w);
  const repository = createSnapshotRepository({
    backend: config.snapshot.repository_backend,
    signing: {
      secret: signingKey.secret,
      unsigned: unsignedReadMode(config.snapshot.unsigned_records),
    },
    posixFs: { snapshotStore: config.backend.posix_fs.snapshot_store },
    ...(config.snapshot.repository_backend === 'oss' ? { oss: ossOptions(config) } : {}),
    localCachePath: config.snapshot.local_cache_path,
    cacheMaxSizeGb: config.backend.oss.cache_max_size_gb,
    compression: {
      enabled: config.snapshot.publish_compression.enabled,
      level: config.snapshot.publish_compression.level,
    },
    logger: logger.child({ component: 'repository' }),
  });
  await signUnsignedAtStartup(repository, {
    policy: config.snapshot.unsigned_records,
    backend: config.snapshot.repository_backend,
    markerPath: join(config.home_path, 'snapshot-records-signed'),
    logger,
  });
  await repository.reconcile();

  // The proxy is built after the orchestrator, which must still be able to tell it when an instance stops.
  const proxyRef: { current?: SandboxProxy } = {};
  // Started once the API listens (the scheduler may route to the node as soon as it registers).
  const reporterRef: { current?: HeartbeatReporter } = {};
  const backend = new ContainerBackend({
    runtime,
    network,
    images,
    repository,
    sharePaused: config.snapshot.repository_backend === 'oss',
    warmSandboxes: config.pool.warm_sandboxes,
    tools,
    toolsRoot: join(config.deps_path, 'tools'),
    residentPauseGraceMs: config.orchestrator.resident_pause_grace_secs * 1000,
    runtimeVersions: {
      envd: ENVD_VERSION,
      ...runtimeHost.versions,
    },
    envdPort: config.tools.control_plane_port,
    envdPollMs: config.envd.poll_ms,
    envdInitTimeoutMs: config.envd.init_timeout_secs * 1000,
    pidsLimit: runtimeHost.pidsPerSandbox,
    envdToken: (id) => tokens.envd(id),
    envdInitKey: (id) => tokens.envdInit(id),
    signedUrlMaxLifetimeSecs: config.sandbox_proxy.signed_url_max_lifetime_secs,
    idRanges,
    logger: logger.child({ component: 'backend' }),
  });
  const observability = new SandboxObservability({
    db,
    cgroupParent: runtimeHost.cgroupParent,
    sandboxesDir: runtimeHost.sandboxesDir,
    containerIdOf: (r) => backend.containerIdOf(r),
    envdPort: config.tools.control_plane_port,
    envdToken: (id) => tokens.envd(id),
    intervalMs: config.observability.sandbox_metrics.interval_secs * 1000,
    maxSamples: config.observability.sandbox_metrics.max_samples,
    logRetentionMs: config.observability.sandbox_logs.retention_hours * 3600_000,
    registry: metrics.registry,
    logger: logger.child({ component: 'sandbox-observability' }),
  });
  const catalog = new TemplateCatalog({
    repository,
    virtualizationMode: runtime.virtualizationMode,
    envdVersion: ENVD_VERSION,
  });
  const admission = new AdmissionControl(admissionLimitsFrom(config));
  const idempotency = new IdempotencyLayer(
    new IdempotencyStore(db, {
      team: localTeamId(apiKey.key),
      retentionMs: config.api.idempotency_retention_secs * 1000,
      maxKeys: config.api.idempotency_max_keys,
    }),
    logger.child({ component: 'idempotency' }),
  );
  const extension = config.custom_extension.url
    ? new HookClient({
        url: config.custom_extension.url,
        timeoutMs: config.custom_extension.timeout_ms,
        logger: logger.child({ component: 'custom-extension' }),
      })
    : undefined;
  const events = new SandboxEventStore(db, { teamId: localTeamId(apiKey.key) });
  const orchestrator = new Orchestrator({
    store,
    backend,
    templates: withResourceLimits(catalog, admission),
    newId: () => idempotency.sandboxChosen(newSandboxId()),
    defaultTimeoutSecs: config.orchestrator.default_sandbox_timeout_secs,
    autoEvictIntervalMs: config.orchestrator.auto_evict_interval_ms,
    autoResumeMinTimeoutSecs: config.orchestrator.auto_resume_min_sandbox_timeout_secs,
    transitionWaitMs: config.orchestrator.max_transition_wait_secs * 1000,
    pausedQuotaBytes: await pausedQuotaBytes(config, runtime.captureRoot),
    pausedRetentionMs: config.orchestrator.paused_retention_secs * 1000,
    logger: logger.child({ component: 'orchestrator' }),
    onInstanceStopped: (instanceId) => proxyRef.current?.closeInstance(instanceId),
    onLifecycle: (e) => {
      events.onLifecycle(e);
      observability.onLifecycle(e);
      reporterRef.current?.onLifecycle(e);
    },
    ...(extension ? { extension } : {}),
    observe: (operation, fn, stage) => metrics.observe(operation, fn, stage),
  });
  metrics.trackSandboxStates(() => orchestrator.stateCounts());
  await orchestrator.init();
  idempotency.recover((id) => orchestrator.find(id) !== undefined);
  await observability.start(orchestrator);

  await ensureBaseTemplate({
    alias: config.template_build.base_template_alias,
    image: config.template_build.base_template_image,
    resources: {
      cpuCount: config.machine.vcpu_count,
      memoryMB: config.machine.mem_size_mib,
      diskSizeMB: config.runtime.default_disk_size_mb,
    },
    runtimeVersions: { envd: ENVD_VERSION, tools: tools.version },
    virtualizationMode: runtime.virtualizationMode,
    repository,
    images,
    logger,
  }).catch((err: unknown) => logger.error({ err }, 'could not register the base template'));
  // Pre-start sandboxes of the default template now, so the first creates do not wait for a boot.
  if (config.template_build.base_template_alias) {
    catalog
      .resolveLaunchable(config.template_build.base_template_alias)
      .then((base) => backend.prewarm(base, base.resources))
      .catch(() => {});
  }

  const templates = await createTemplateService({
    homePath: config.home_path,
    sandboxesDir: runtimeHost.sandboxesDir,
    runtime,
    network,
    images,
    repository,
    tools,
    envdPort: config.tools.control_plane_port,
    envdPollMs: config.envd.poll_ms,
    envdInitTimeoutMs: config.envd.init_timeout_secs * 1000,
    pidsLimit: runtimeHost.pidsPerSandbox,
    envdInitKey: (id) => tokens.envdInit(id),
    idRanges,
    backend,
    maxConcurrentBuilds: config.template_build.max_concurrent_builds,
    maxBuildMs: config.template_build.max_build_secs * 1000,
    logLimits: {
      maxEntries: config.template_build.max_log_lines,
      maxBytes: config.template_build.max_log_mb * 1024 ** 2,
    },
    maxUploadBytes: config.template_build.max_upload_mb * 1024 ** 2,
    uploadLinkTtlMs: config.template_build.upload_link_ttl_secs * 1000,
    uploadRetentionMs: config.template_build.upload_retention_hours * 3600_000,
    logRetentionMs: config.template_build.log_retention_hours * 3600_000,
    artefactsQuotaBytes: config.template_build.artefacts_quota_mb * 1024 ** 2,
    cache: {
      maxEntries: config.template_build.cache_max_entries,
      maxAgeMs: config.template_build.cache_max_age_hours * 3600_000,
    },
    defaultImage: config.image.resolver.default_image,
    runtimeVersions: { envd: ENVD_VERSION, tools: tools.version },
    virtualizationMode: runtime.virtualizationMode,
    nodeName: identity.nodeId,
    uploadSecret: uploadSecretFromApiKey(apiKey.key),
    logger: logger.child({ component: 'templates' }),
  });

  const domains = config.sandbox_proxy.domains;
  const proxy = new SandboxProxy({
    domains,
    envdPort: config.tools.control_plane_port,
    platformApiKey: apiKey.key,
    directory: new OrchestratorDirectory(orchestrator, tokens, {
      signedUrlMaxLifetimeSecs: config.sandbox_proxy.signed_url_max_lifetime_secs,
      signedUrlScanHashesPerSec: config.sandbox_proxy.signed_url_scan_hashes_per_sec,
    }),
    logger: logger.child({ component: 'proxy' }),
  });
  proxyRef.current = proxy;

  const { app, server } = createHttpServer({
    apiKey: apiKey.key,
    bodyLimitBytes: config.api.body_limit_bytes,
    logger,
    metrics,
    dataPlanes: nodeDataPlanes({
      sandboxProxy: proxy,
      templateUploads: new TemplateUploadEndpoint(
        templates.files,
        logger.child({ component: 'template-uploads' }),
      ),
    }),
  });
  registerAdmission(app, admission);
  idempotency.register(app);
  registerHealthRoutes(app, metrics.registry);
  const hostMetrics = new HostMetricsSampler();
  registerNodeRoutes(app, {
    enabled: config.observability.enabled,
    identity,
    host: hostMetrics,
    counters: () => orchestrator.counters(),
  });
  registerSandboxRoutes(app, {
    orchestrator,
    tokens,
    parsePolicy: parseNetworkPolicy,
    ...(domains[0] ? { domain: domains[0] } : {}),
    customExtensionConfigured: Boolean(config.custom_extension.url),
    cold: {
      defaults: {
        cpuCount: config.machine.vcpu_count,
        memoryMB: config.machine.mem_size_mib,
        diskSizeMB: config.runtime.default_disk_size_mb,
      },
      launchable: (image, resources) => {
        // The defaults too must fit the node's limits (the request's own values were checked on admission).
        admission.checkResources(resources, 'cold sandbox request');
        return coldLaunchable(
          {
            images,
            runtimeVersions: { envd: ENVD_VERSION, tools: tools.version },
            virtualizationMode: runtime.virtualizationMode,
            envdVersion: ENVD_VERSION,
          },
          image,
          resources,
        );
      },
    },
  });
  registerTemplateRoutes(app, {
    repository,
    builder: templates.builder,
    files: templates.files,
    logs: templates.logs,
    sandboxesUsing: (id) => orchestrator.all().filter((r) => r.templateId === id).length,
    defaults: {
      cpuCount: config.machine.vcpu_count,
      memoryMB: config.machine.mem_size_mib,
      diskSizeMB: config.runtime.default_disk_size_mb,
    },
    envdVersion: ENVD_VERSION,
    onDeleted: (id) => backend.removeLocalSnapshot(id),
    teamId: localTeamId(apiKey.key),
  });

  registerSnapshotRoutes(app, { orchestrator, repository });
  registerMetricsRoutes(app, observability.metricsRoutes());
  registerLogRoutes(app, observability.logRoutes());
  registerEventRoutes(app, events);
  registerTeamRoutes(app, { apiKey: apiKey.key });

  const [host, portText] = splitAddr(config.api_addr);
  await app.listen({ host, port: Number(portText) });
  logger.info({ addr: config.api_addr, node: identity.nodeId }, 'aenv server listening');
  orchestrator.startEviction();
  images.start();
  const report = reporterSettings(config);
  if (report) {
    reporterRef.current = startHeartbeatReporter(report, {
      identity,
      counters: () => orchestrator.counters(),
      host: hostMetrics,
      sandboxes: () => orchestrator.all().map((r) => ({ id: r.id, resources: r.resources })),
      resourcesOf: (id) => orchestrator.find(id)?.resources,
      logger: logger.child({ component: 'scheduler-report' }),
    });
    logger.info(
      { endpoint: report.endpoint, intervalSecs: report.intervalMs / 1000 },
      'reporting to the scheduler',
    );
  } else if (config.cluster.scheduler_endpoint) {
    logger.warn(
      'cluster.scheduler_endpoint is set but observability.scheduler_report.enabled is false: this node does not report to the scheduler',
    );
  }

  return {
    config,
    logger,
    db,
    images,
    network,
    repository,
    backend,
    orchestrator,
    proxy,
    async close() {
      logger.info('shutting down: pausing sandboxes');
      // The scheduler sees the node LINGERING while it pauses, and forgets it once the sandboxes are paused.
      await reporterRef.current?.drain();
      server.closeIdleConnections();
      await templates.close();
      await observability.stop();
      await orchestrator.shutdown();
      await reporterRef.current?.close();
      await extension?.drain();
      await backend.close();
      proxy.closeAll();
      // Requests still in flight get a moment to finish; then connections that never sent a request (which
      // close() would otherwise wait on until the headers timeout) are cut.
      const closed = app.close();
      const force = setTimeout(() => server.closeAllConnections(), 2000);
      await closed;
      clearTimeout(force);
      await network.shutdown();
      await runtime.close();
      await images.stop();
      await repository.close();
      db.close();
      await nodeLock.release();
      logger.info('shutdown complete');
    },
  };
}

/** `[orchestrator].paused_quota_mb`, 0 = half the size of the volume the pause artifacts live on. */
async function pausedQuotaBytes(config: AenvConfig, captureRoot: string): Promise<number> {
  const mb = config.orchestrator.paused_quota_mb;
  if (mb > 0) return mb * 1024 ** 2;
  return Math.floor((await filesystemBytes(captureRoot)) / 2);
}

function splitAddr(addr: string): [string, string] {
  const i = addr.lastIndexOf(':');
  const host = addr.slice(0, i).replace(/^\[|\]$/g, '');
  return [host || '0.0.0.0', addr.slice(i + 1)];
}

function ossOptions(config: AenvConfig) {
  const o = config.backend.oss;
  return {
    endpoint: o.endpoint ?? '',
    bucket: o.bucket ?? '',
    region: o.region ?? '',
    prefix: o.prefix ?? '',
    addressingStyle: o.addressing_style,
    credentialProcess: o.credential_process,
    accessKeyId: o.access_key_id,
    accessKeySecret: o.access_key_secret,
    securityToken: o.security_token,
  };
}

/** `aenv server`: returns the process exit code. */
export async function runServer(opts: RunServerOptions): Promise<number> {
  let loaded;
  try {
    loaded = loadConfig({ configPath: opts.configPath, env: opts.env, flags: opts.flags ?? {} });
    // Refused before anything touches the host.
    runtimeFactory(loaded.config.virtualization_mode);
    reporterSettings(loaded.config);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`aenv: invalid configuration:\n${e.message}\n`);
      return 2;
    }
    throw e;
  }
  const { config } = loaded;
  const logger = createLogger(config.log_format, config.log_level);
  if (opts.processGuards) installProcessGuards(logger);
  logger.info({ config: loaded.configPath }, 'configuration loaded');
  for (const w of loaded.warnings) logger.warn(w);
  const notice = containerModeNotice(config, loaded.keysWithoutEffectInContainerMode);
  if (notice) logger.info(notice);

  if (opts.setupOnly) {
    const code = await runSetupScript(config.deps_path, logger);
    if (code !== 0) return code;
    const tools = await prepareTools(config, logger);
    logger.info({ dir: tools.dir, version: tools.version }, 'setup complete');
    return 0;
  }

  // Everything the server (and the tools it runs) creates is private unless made otherwise on purpose:
  // the few paths sandboxes must reach get their modes explicitly (docs/security.md, "local host users").
  process.umask(0o077);
  let node: Node;
  try {
    node = await startNode(config, logger);
  } catch (err) {
    logger.fatal({ err }, 'aenv server failed to start');
    return 1;
  }
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) {
        logger.warn({ signal }, 'second signal: exiting without finishing the shutdown');
        process.exit(130);
      }
      stopping = true;
      logger.info({ signal }, 'signal received');
      node.close().then(
        () => resolve(0),
        (err: unknown) => {
          logger.error({ err }, 'shutdown failed');
          resolve(1);
        },
      );
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
}
