import type { FastifyInstance, FastifyReply } from 'fastify';
import {
  ENVD_PORT,
  connectSchema,
  connectV2Schema,
  forkSchema,
  networkUpdateSchema,
  newSandboxSchema,
  pauseSchema,
  refreshSchema,
  resumeSchema,
  SANDBOX_ID_RESPONSE_HEADER,
  timeoutSchema,
  type ForkResult,
  type ListedSandbox,
  type NewSandbox,
  type SandboxDetail,
  type SandboxResponse,
  isSandboxId,
} from '@aenv/protocol';
import type {
  CreateSandboxInput,
  LaunchableTemplate,
  Orchestrator,
} from '../../orchestrator/orchestrator.js';
import { parseColdRequest, type ColdDefaults, type ColdRequest } from '../cold-request.js';
import type { SandboxRecord } from '../../orchestrator/types.js';
import type { EgressPolicy } from '../../network/types.js';
import { ApiError, errorAnswer } from '../errors.js';
import { parseIngressSettings } from '../ingress-settings.js';
import { listedSandbox, parseV2ListQuery, v2ListPage } from '../sandbox-list.js';
import { matchesMetadata, parseMetadataFilter } from '../metadata-filter.js';
import { parseBody, parseRequiredBody } from '../parse-body.js';
import { checkParams } from '../../extension/params.js';
import type { VolumeService } from '../../volume/service.js';
import { maskedRules } from '../../network/egress/header-rules.js';
import {
  refuseUnsupportedCreateFields,
  refuseUnsupportedNetworkUpdateFields,
} from '../unsupported-fields.js';
import {
  KEEP_MEMORY,
  REFRESH_DURATION_SECS,
  RESUME_TIMEOUT_SECS,
  SET_TIMEOUT_SECS,
  V1_CREATE_AUTO_PAUSE,
  V2_CONNECT_TIMEOUT_SECS,
  V2_CREATE_AUTO_PAUSE,
  V2_CREATE_TIMEOUT_SECS,
} from '../wire-defaults.js';

export interface SandboxTokens {
  envd(sandboxId: string): string;
  traffic(sandboxId: string): string;
}

export interface SandboxRouteDeps {
  orchestrator: Orchestrator;
  /** Mounts `volumeMounts` (docs/volumes.md); absent: they are refused. */
  volumes?: VolumeService;
  tokens: SandboxTokens;
  /** Validates egress settings (docs/networking.md); throws a 400-class error. */
  parsePolicy(input: {
    allowOut?: string[];
    denyOut?: string[];
    allowInternetAccess?: boolean;
    rules?: unknown;
    egressProxy?: unknown;
  }): EgressPolicy;
  /** Checks that need the network (an egressProxy name resolves where it may be dialled); throws a 400. */
  checkPolicy?(policy: EgressPolicy): Promise<void>;
  /** `[tools].control_plane_port`: envd's port, which `network.httpsPorts` may not list (default 49983). */
  envdPort?: number;
  /** First `[sandbox_proxy].domains` entry, advertised as `domain`. */
  domain?: string;
  /** Whether a custom extension is configured (non-empty customExtensionParams need one). */
  customExtensionConfigured: boolean;
  /** `POST /sandboxes-cold`: the resources a request leaves out, and the image to boot. */
  cold: {
    defaults: ColdDefaults;
    /** Pulls `image`; an image the caller got wrong is a 400 naming it. */
    launchable(
      image: string,
      resources: ColdRequest['resources'],
      drives: ColdRequest['drives'],
    ): Promise<LaunchableTemplate>;
  };
}

/** What a create route fills in for fields the request leaves out. */
interface CreateDefaults {
  /** undefined: `[orchestrator].default_sandbox_timeout_secs`. */
  timeoutSecs?: number;
  autoPause: boolean;
  /** v2 sandboxes are always secured (E2B `NewSandboxV2`); v1 ones when the request says so. */
  secure: (requested: boolean | undefined) => boolean;
}

const V1_CREATE: CreateDefaults = {
  autoPause: V1_CREATE_AUTO_PAUSE,
  secure: (requested) => requested ?? false,
};
// `secure` is not a NewSandboxV2 field: whatever a client sends there, E2B secures the sandbox, and so does aenv.
const V2_CREATE: CreateDefaults = {
  timeoutSecs: V2_CREATE_TIMEOUT_SECS,
  autoPause: V2_CREATE_AUTO_PAUSE,
  secure: () => true,
};

/** A path sandboxID that is not a UUID is simply not found (docs/security.md). */
function sandboxId(raw: string): string {
  if (!isSandboxId(raw)) throw new ApiError(404, `sandbox ${raw} not found`);
  return raw;
}

export function registerSandboxRoutes(app: FastifyInstance, deps: SandboxRouteDeps): void {
  const { orchestrator: orch, tokens } = deps;

  const sandboxView = (r: SandboxRecord): SandboxResponse => ({
    templateID: r.templateId,
    sandboxID: r.id,
    ...(r.alias ? { alias: r.alias } : {}),
    clientID: '',
    envdVersion: r.envdVersion,
    ...(r.secure ? { envdAccessToken: tokens.envd(r.id) } : {}),
    trafficAccessToken: r.network.allowPublicTraffic ? null : tokens.traffic(r.id),
    ...(deps.domain ? { domain: deps.domain } : {}),
  });

  const listedView = (r: SandboxRecord): ListedSandbox => listedSandbox(r, orch.expiryOf(r));

  const detailView = (r: SandboxRecord): SandboxDetail => {
    const n = r.network;
    const rules = n.rules && Object.keys(n.rules).length > 0 ? n.rules : undefined;
    const hasNetwork =
      !n.allowPublicTraffic ||
      n.allowOut.length > 0 ||
      n.denyOut.length > 0 ||
      !!rules ||
      n.egressProxy !== undefined ||
      n.httpsPorts !== undefined ||
      n.maskRequestHost !== undefined;
    return {
      ...listedView(r),
      ...(r.secure ? { envdAccessToken: tokens.envd(r.id) } : {}),
      allowInternetAccess: n.allowInternetAccess,
      ...(deps.domain ? { domain: deps.domain } : {}),
      ...(hasNetwork
        ? {
            network: {
              allowPublicTraffic: n.allowPublicTraffic,
              ...(n.allowOut.length ? { allowOut: n.allowOut } : {}),
              ...(n.denyOut.length ? { denyOut: n.denyOut } : {}),
              // Header values are credentials: shown masked, never as given.
              ...(rules ? { rules: maskedRules(rules) } : {}),
              // `SandboxEgressProxyInfo`: the password is never shown.
              ...(n.egressProxy
                ? {
                    egressProxy: {
                      address: n.egressProxy.address,
                      ...(n.egressProxy.username !== undefined ? { username: n.egressProxy.username } : {}),
                    },
                  }
                : {}),
              ...(n.httpsPorts ? { httpsPorts: n.httpsPorts } : {}),
              ...(n.maskRequestHost !== undefined ? { maskRequestHost: n.maskRequestHost } : {}),
            },
          }
        : {}),
      lifecycle: { autoResume: r.autoResume, onTimeout: r.onTimeout },
      ...(r.paused ? { pauseKind: r.paused.kind } : {}),
    };
  };

  const created = (reply: FastifyReply, r: SandboxRecord, status: number) =>
    reply.code(status).header(SANDBOX_ID_RESPONSE_HEADER, r.id).send(sandboxView(r));

  /** What both create routes take from a request besides what the sandbox starts from. */
  const createInput = (
    req: Omit<NewSandbox, 'templateID' | 'allow_internet_access'>,
    allowInternetAccess: boolean | undefined,
    defaults: CreateDefaults,
  ): Omit<CreateSandboxInput, 'templateId'> => {
    // An empty object is no params (like an empty envVars): the template's, if any, apply.
    const extensionParams =
      req.customExtensionParams && Object.keys(req.customExtensionParams).length > 0
        ? checkParams(req.customExtensionParams, 'customExtensionParams')
        : undefined;
    if (extensionParams && !deps.customExtensionConfigured) {
      throw new ApiError(
        400,
        'customExtensionParams given but no custom extension is configured on this node',
      );
    }
    const policy = deps.parsePolicy({
      allowOut: req.network?.allowOut,
      denyOut: req.network?.denyOut,
      allowInternetAccess,
      rules: req.network?.rules,
      egressProxy: req.network?.egressProxy,
    });
    const onTimeout = req.lifecycle?.onTimeout ?? ((req.autoPause ?? defaults.autoPause) ? 'pause' : 'kill');
    const autoResume = req.autoResume?.enabled ?? req.lifecycle?.autoResume ?? false;
    // A filesystem-only snapshot cold-boots on resume: traffic cannot wake it (E2B `autoPauseMemory`).
    if (req.autoPauseMemory === false && autoResume)
      throw new ApiError(400, 'autoPauseMemory: false cannot be combined with autoResume');
    const timeoutSecs = req.timeout ?? defaults.timeoutSecs;
    return {
      ...(timeoutSecs !== undefined ? { timeoutSecs } : {}),
      onTimeout,
      ...(req.autoPauseMemory === false ? { autoPauseMemory: false } : {}),
      autoResume,
      secure: defaults.secure(req.secure),
      metadata: req.metadata ?? {},
      envVars: req.envVars ?? {},
      allowPublicTraffic: req.network?.allowPublicTraffic ?? true,
      ...parseIngressSettings(req.network, deps.envdPort ?? ENVD_PORT),
      policy,
      // No `network`: a snapshot launches with the settings it recorded (docs/networking.md#snapshot-launches).
      ...(req.network === undefined ? { inheritNetwork: true } : {}),
      ...(extensionParams ? { customExtensionParams: extensionParams } : {}),
    };
  };

  /**
   * Runs a create whose `volumeMounts` are `requested`: the factory resolves them with what the template (a
   * snapshot) needs, and the volumes are kept from deletion until the record lists them.
   */
  const withVolumeMounts = async (
    requested: unknown,
    make: (resolve: Pick<CreateSandboxInput, 'resolveVolumeMounts'>) => Promise<SandboxRecord>,
  ): Promise<SandboxRecord> => {
    const volumes = deps.volumes;
    if (!volumes) return make({});
    let release = () => {};
    try {
      return await make({
        resolveVolumeMounts: async (needed) => {
          const mounts = await volumes.resolveMounts(requested, needed);
          release = volumes.hold(mounts);
          return mounts;
        },
      });
    } finally {
      release();
    }
  };

  const create = async (body: unknown, reply: FastifyReply, defaults: CreateDefaults) => {
    const req = parseRequiredBody(newSandboxSchema, body, 'sandbox request');
    refuseUnsupportedCreateFields(body, { volumes: deps.volumes !== undefined });
    const input = createInput(req, req.allow_internet_access, defaults);
    await deps.checkPolicy?.(input.policy);
    const requested = (body as { volumeMounts?: unknown }).volumeMounts;
    const r = await withVolumeMounts(requested, (resolve) =>
      orch.create({ templateId: req.templateID, ...input, ...resolve }),
    );
    return created(reply, r, 201);
  };

  app.post('/sandboxes', async (req, reply) => create(req.body, reply, V1_CREATE));
  app.post('/v2/sandboxes', async (req, reply) => create(req.body, reply, V2_CREATE));

  // AgentENV's cold start: the image is pulled (or found in the cache) and booted, no template build first.
  app.post('/sandboxes-cold', async (req, reply) => {
    const { body, resources, drives } = parseColdRequest(req.body, deps.cold.defaults, {
      volumes: deps.volumes !== undefined,
    });
    const input = createInput(body, body.allowInternetAccess, V1_CREATE);
    await deps.checkPolicy?.(input.policy);
    const requested = (req.body as { volumeMounts?: unknown }).volumeMounts;
    // Checked before the image is pulled: a bad mount costs no pull.
    deps.volumes?.resolveMounts(requested);
    const template = await deps.cold.launchable(body.image, resources, drives);
    const r = await withVolumeMounts(requested, (resolve) =>
      orch.createFrom(template, { ...input, ...resolve }),
    );
    return created(reply, r, 201);
  });

  app.get('/sandboxes', async (req) => {
    const filter = parseMetadataFilter((req.query as Record<string, unknown>).metadata);
    return orch
      .all()
      .filter((r) => r.state === 'running' && matchesMetadata(r.metadata, filter))
      .sort((a, b) =>
        a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : a.id.localeCompare(b.id),
      )
      .map(listedView);
  });

  app.get('/v2/sandboxes', async (req, reply) =>
    v2ListPage(orch.listable(), parseV2ListQuery(req.query as Record<string, unknown>), reply, listedView),
  );

  // A sandbox another node paused into the shared repository (that node lost or drained) is this node's once
  // asked about: GET shows it paused here, DELETE kills it for good (docs/cluster.md#node-loss).
  app.get<{ Params: { id: string } }>('/sandboxes/:id', async (req) => {
    const id = sandboxId(req.params.id);
    await orch.adopt(id);
    return detailView(orch.get(id));
  });

  app.delete<{ Params: { id: string } }>('/sandboxes/:id', async (req, reply) => {
    const id = sandboxId(req.params.id);
    await orch.adopt(id);
    await orch.kill(id);
    return reply.code(204).send();
  });

  app.post<{ Params: { id: string } }>('/sandboxes/:id/timeout', async (req, reply) => {
    const body =
      req.body === undefined
        ? { timeout: SET_TIMEOUT_SECS }
        : parseBody(timeoutSchema, req.body, 'timeout request');
    await orch.setTimeout(sandboxId(req.params.id), body.timeout);
    return reply.code(204).send();
  });

  app.post<{ Params: { id: string } }>('/sandboxes/:id/refreshes', async (req, reply) => {
    const body = parseBody(refreshSchema, req.body, 'refresh request');
    await orch.refresh(sandboxId(req.params.id), body.duration ?? REFRESH_DURATION_SECS);
    return reply.code(204).send();
  });

  const connect = async (id: string, timeout: number, reply: FastifyReply, memory?: boolean) => {
    const { record, resumed } = await orch.connect(sandboxId(id), timeout, {
      memory: memory ?? KEEP_MEMORY,
    });
    return created(reply, record, resumed ? 201 : 200);
  };
  app.post<{ Params: { id: string } }>('/sandboxes/:id/connect', async (req, reply) => {
    const body = parseRequiredBody(connectSchema, req.body, 'connect request');
    return connect(req.params.id, body.timeout, reply, body.memory);
  });
  app.post<{ Params: { id: string } }>('/v2/sandboxes/:id/connect', async (req, reply) => {
    const body = parseBody(connectV2Schema, req.body, 'connect request');
    return connect(req.params.id, body.timeout ?? V2_CONNECT_TIMEOUT_SECS, reply, body.memory);
  });

  app.post<{ Params: { id: string } }>('/sandboxes/:id/resume', async (req, reply) => {
    const body = parseBody(resumeSchema, req.body, 'resume request');
    const r = await orch.resume(sandboxId(req.params.id), body.timeout ?? RESUME_TIMEOUT_SECS, {
      memory: body.memory ?? KEEP_MEMORY,
      ...(body.autoPause !== undefined ? { onTimeout: body.autoPause ? 'pause' : 'kill' } : {}),
    });
    return created(reply, r, 201);
  });

  app.post<{ Params: { id: string } }>('/sandboxes/:id/pause', async (req, reply) => {
    const body = parseBody(pauseSchema, req.body, 'pause request');
    await orch.pause(sandboxId(req.params.id), {
      memory: body.memory ?? KEEP_MEMORY,
      requireHealthyGuest: body.requireHealthyGuest ?? false,
    });
    return reply.code(204).send();
  });

  app.post<{ Params: { id: string } }>('/sandboxes/:id/fork', async (req, reply) => {
    const body = parseBody(forkSchema, req.body, 'fork request');
    const results = await orch.fork(sandboxId(req.params.id), {
      count: body.count ?? 1,
      ...(body.timeout !== undefined ? { timeoutSecs: body.timeout } : {}),
    });
    return reply
      .code(201)
      .send(
        results.map((r): ForkResult =>
          r.ok ? { sandbox: sandboxView(r.record) } : { error: errorAnswer(r.error).body },
        ),
      );
  });

  app.put<{ Params: { id: string } }>('/sandboxes/:id/network', async (req, reply) => {
    const body = parseBody(networkUpdateSchema, req.body, 'network update');
    refuseUnsupportedNetworkUpdateFields(req.body);
    const policy = deps.parsePolicy({
      allowOut: body.allowOut,
      denyOut: body.denyOut,
      allowInternetAccess: body.allow_internet_access,
      rules: body.rules,
      egressProxy: body.egressProxy,
    });
    await deps.checkPolicy?.(policy);
    await orch.updateNetwork(sandboxId(req.params.id), policy);
    return reply.code(204).send();
  });

  app.get<{ Params: { id: string } }>('/sandboxes/:id/custom-extension-params', async (req) =>
    orch.extensionParams(sandboxId(req.params.id)),
  );

  app.patch<{ Params: { id: string } }>('/sandboxes/:id/custom-extension-params', async (req) => {
    if (req.body === undefined || req.body === null)
      throw new ApiError(400, 'invalid custom extension params patch: a JSON object body is required');
    const id = sandboxId(req.params.id);
    const patch = checkParams(req.body, 'the custom extension params patch');
    // 404 before 400: an unknown sandbox is unknown whether or not an extension is configured.
    orch.get(id);
    return orch.patchExtensionParams(id, patch);
  });
}
