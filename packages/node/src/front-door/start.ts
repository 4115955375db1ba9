import type { AenvConfig } from '@aenv/config';
import type { FastifyInstance } from 'fastify';
import { TemplateUploadEndpoint } from '../api/template-upload.js';
import type { ServerMetrics } from '../observability/metrics.js';
import type { Orchestrator } from '../orchestrator/orchestrator.js';
import { OrchestratorDirectory } from '../proxy/orchestrator-directory.js';
import { SandboxProxy, type DataPlane } from '@aenv/proxy';
import type { SandboxTokenIssuer } from '../secrets/index.js';
import type { TemplateFileStore } from '../template/file-store.js';
import type { Logger } from '../util/log.js';
import type { Subsystem } from '../util/subsystem.js';
import { nodeDataPlanes } from './data-planes.js';
import { createHttpServer } from './http-server.js';

export interface FrontDoorDeps {
  apiKey: string;
  metrics: ServerMetrics;
  orchestrator: Orchestrator;
  tokens: SandboxTokenIssuer;
  templateFiles: TemplateFileStore;
  /** The volume content API (api/volume-content.ts), served before the control plane's API-key check. */
  volumeContent?: DataPlane;
  /** Registers the control plane's routes on the app (api/start.ts). */
  controlPlane: (app: FastifyInstance) => void;
  logger: Logger;
}

export interface FrontDoor extends Subsystem {
  proxy: SandboxProxy;
  /** Shutdown begins: keep-alive connections that are idle now are closed, requests in flight go on. */
  closeIdle(): void;
}

/** Connections that never sent a request hold `close()` until the headers timeout: cut after this. */
const CLOSE_GRACE_MS = 2000;

/**
 * `api_addr` and `[sandbox_proxy]`: the node's HTTP server, listening, with the data plane (the sandbox proxy,
 * template upload links) in front of the control plane.
 */
export async function startFrontDoor(
  config: Pick<AenvConfig, 'api_addr' | 'api' | 'sandbox_proxy' | 'tools'>,
  deps: FrontDoorDeps,
): Promise<FrontDoor> {
  const { logger } = deps;
  const proxy = new SandboxProxy({
    domains: config.sandbox_proxy.domains,
    envdPort: config.tools.control_plane_port,
    platformApiKey: deps.apiKey,
    directory: new OrchestratorDirectory(deps.orchestrator, deps.tokens, {
      signedUrlMaxLifetimeSecs: config.sandbox_proxy.signed_url_max_lifetime_secs,
      signedUrlScanHashesPerSec: config.sandbox_proxy.signed_url_scan_hashes_per_sec,
    }),
    logger: logger.child({ component: 'proxy' }),
  });
  const { app, server } = createHttpServer({
    apiKey: deps.apiKey,
    bodyLimitBytes: config.api.body_limit_bytes,
    logger,
    metrics: deps.metrics,
    dataPlanes: nodeDataPlanes({
      sandboxProxy: proxy,
      templateUploads: new TemplateUploadEndpoint(
        deps.templateFiles,
        logger.child({ component: 'template-uploads' }),
      ),
      ...(deps.volumeContent ? { volumeContent: deps.volumeContent } : {}),
    }),
  });
  deps.controlPlane(app);
  const [host, port] = splitAddr(config.api_addr);
  await app.listen({ host, port: Number(port) });
  return {
    proxy,
    closeIdle: () => server.closeIdleConnections(),
    async close() {
      proxy.closeAll();
      // Requests still in flight get a moment to finish; then connections that never sent a request (which
      // close() would otherwise wait on until the headers timeout) are cut.
      const closed = app.close();
      const force = setTimeout(() => server.closeAllConnections(), CLOSE_GRACE_MS);
      await closed;
      clearTimeout(force);
    },
  };
}

function splitAddr(addr: string): [string, string] {
  const i = addr.lastIndexOf(':');
  const host = addr.slice(0, i).replace(/^\[|\]$/g, '');
  return [host || '0.0.0.0', addr.slice(i + 1)];
}
