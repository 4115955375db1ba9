import { connectNodeAdapter } from '@connectrpc/connect-node';
import {
  ACCESS_TOKEN_HEADER,
  DEFAULT_PATH,
  ENVD_UNAUTHORIZED_MESSAGE,
  Filesystem,
  INIT_KEY_HEADER,
  InitBodyError,
  Process,
  validateInitBody,
} from '@aenv/protocol/envd';
import { isTokenExempt, safeEqual, checkFileSigning } from './auth/access.js';
import { resolveUser, UnknownUserError, type EnvdContext } from './context.js';
import { filesystemService } from './fs/service.js';
import { listenHttp } from './http/listen.js';
import {
  drainRequest,
  HttpError,
  readBody,
  sendEmpty,
  sendError,
  sendJson,
  type Req,
  type Res,
} from './http/respond.js';
import type { Logger } from './logger.js';
import type { NativeApi } from './native.js';
import { ProcessManager } from './process/manager.js';
import { processService } from './process/service.js';
import { downloadFile } from './rest/files-download.js';
import { uploadFiles } from './rest/files-upload.js';
import { MetricsReader } from './rest/metrics.js';
import { EnvdState } from './state/envd-state.js';
import { createAsUser } from './users/credentials.js';
import { UserDb } from './users/user-db.js';

export interface EnvdOptions {
  port: number;
  host: string;
  /** aenv-init, used as `exec-as` to start PTYs (and, without the addon, commands) as a user. */
  initPath: string;
  /** aenv_native.node; without it envd can only act as its own user and cannot watch or set metadata. */
  native: NativeApi | undefined;
  /** Where /init data is persisted across envd restarts; undefined = memory only. */
  statePath?: string;
  sandboxId?: string;
  templateId?: string;
  /** The node's credential for /init until /init replaces it (AENV_ENVD_INIT_KEY). */
  bootInitKey?: string;
  /** PATH for processes (envd's own PATH); /init envVars may override it. */
  basePath?: string;
  passwdPath?: string;
  groupPath?: string;
  logger: Logger;
}

export interface RunningEnvd {
  port: number;
  context: EnvdContext;
  processes: ProcessManager;
  close(): Promise<void>;
}

const CORS_HEADERS = {
  'access-control-allow-origin': '*',
  'access-control-allow-methods': 'GET, POST, PUT, PATCH, DELETE, OPTIONS',
  'access-control-allow-headers': '*',
  'access-control-expose-headers': '*',
  'access-control-max-age': '7200',
};

/** Starts envd: Connect RPC (process, filesystem) and the REST API on one HTTP/1.1 + h2c port. */
export async function startEnvd(opts: EnvdOptions): Promise<RunningEnvd> {
  const logger = opts.logger;
  const state = new EnvdState({
    statePath: opts.statePath,
    sandboxId: opts.sandboxId,
    templateId: opts.templateId,
    ...(opts.bootInitKey ? { bootInitKey: opts.bootInitKey } : {}),
    logger,
  });
  const ctx: EnvdContext = {
    state,
    users: new UserDb(opts.passwdPath, opts.groupPath),
    asUser: createAsUser(opts.native),
    native: opts.native,
    logger,
    basePath: opts.basePath || DEFAULT_PATH,
  };
  const processes = new ProcessManager({ initPath: opts.initPath, native: opts.native, logger });
  const metrics = new MetricsReader();

  const rpc = connectNodeAdapter({
    routes(router) {
      router.service(Process, processService(ctx, processes));
      router.service(Filesystem, filesystemService(ctx));
    },
    fallback: (_req, res) => sendError(res as Res, 404, 'not found'),
  });

  async function handleFiles(req: Req, res: Res, url: URL, method: 'GET' | 'POST'): Promise<void> {
    const q = url.searchParams;
    const rawPath = q.get('path') ?? undefined;
    const username = q.get('username') ?? undefined;
    const header = req.headers[ACCESS_TOKEN_HEADER];
    const denied = checkFileSigning({
      token: state.accessToken,
      headerToken: typeof header === 'string' ? header : undefined,
      path: rawPath ?? '',
      op: method === 'GET' ? 'read' : 'write',
      username,
      signature: q.get('signature') ?? undefined,
      expiration: q.get('signature_expiration') ?? undefined,
      nowSeconds: Math.floor(Date.now() / 1000),
      limits: state.signatureLimits,
    });
    if (denied) throw new HttpError(401, denied);
    let user;
    try {
      user = resolveUser(ctx, username);
    } catch (err) {
      if (err instanceof UnknownUserError) throw new HttpError(401, err.message);
      throw err;
    }
    if (method === 'GET') {
      await downloadFile(ctx, req, res, user, rawPath ?? '');
    } else {
      sendJson(res, 200, await uploadFiles(ctx, req, user, rawPath));
    }
  }

  async function handleInit(req: Req, res: Res): Promise<void> {
    if (!mayInit(req)) throw new HttpError(401, ENVD_UNAUTHORIZED_MESSAGE);
    let body;
    try {
      const raw = await readBody(req, 1024 * 1024);
      body = validateInitBody(raw.length ? JSON.parse(raw.toString('utf8')) : {});
    } catch (err) {
      if (err instanceof HttpError) throw err;
      if (err instanceof InitBodyError || err instanceof SyntaxError)
        throw new HttpError(400, `invalid /init body: ${err.message}`);
      throw err;
    }
    state.applyInit(body);
    logger.info('initialized', {
      defaultUser: state.defaultUser,
      defaultWorkdir: state.defaultWorkdir,
      secure: !!state.accessToken,
    });
    sendEmpty(res, 204);
  }

  /**
   * Only the node may run /init (docs/security.md, "envd /init"): it proves it with the init key it gave envd
   * at boot or in the last /init. An envd that holds no init key falls back to E2B's rule: once a token is set,
   * only whoever knows it.
   */
  function mayInit(req: Req): boolean {
    const keys = state.initKeys;
    if (keys.length > 0) {
      const presented = req.headers[INIT_KEY_HEADER];
      return typeof presented === 'string' && keys.some((k) => safeEqual(presented, k));
    }
    const current = state.accessToken;
    const header = req.headers[ACCESS_TOKEN_HEADER];
    return !current || (typeof header === 'string' && safeEqual(header, current));
  }

  async function route(req: Req, res: Res): Promise<void> {
    const method = req.method ?? 'GET';
    const url = new URL(req.url ?? '/', 'http://envd');
    const path = url.pathname;
    for (const [k, v] of Object.entries(CORS_HEADERS)) res.setHeader(k, v);
    if (method === 'OPTIONS') return sendEmpty(res, 204);

    const token = state.accessToken;
    if (token && !isTokenExempt(method, path)) {
      const header = req.headers[ACCESS_TOKEN_HEADER];
      if (typeof header !== 'string' || !safeEqual(header, token))
        return sendError(res, 401, ENVD_UNAUTHORIZED_MESSAGE);
    }

    if (path === '/health' && method === 'GET') return sendEmpty(res, 204);
    if (path === '/init' && method === 'POST') return handleInit(req, res);
    if (path === '/envs' && method === 'GET') return sendJson(res, 200, state.globalEnv());
    if (path === '/metrics' && method === 'GET') return sendJson(res, 200, await metrics.read());
    if (path === '/files' && (method === 'GET' || method === 'POST'))
      return handleFiles(req, res, url, method);
    if (
      path === '/health' ||
      path === '/init' ||
      path === '/envs' ||
      path === '/metrics' ||
      path === '/files'
    ) {
      return sendError(res, 405, `method ${method} not allowed on ${path}`);
    }
    (rpc as (req: Req, res: Res) => void)(req, res);
  }

  const listener = await listenHttp(
    (req, res) => {
      route(req, res).catch(async (err: unknown) => {
        if (res.headersSent) return res.destroy();
        const status = err instanceof HttpError ? err.status : 500;
        if (!(err instanceof HttpError)) logger.error('request failed', { err, path: req.url });
        // Let the client finish sending its upload, or it sees a reset instead of this answer.
        if (!(await drainRequest(req))) res.setHeader('connection', 'close');
        sendError(res, status, (err as Error)?.message ?? String(err));
      });
    },
    opts.port,
    opts.host,
  );
  logger.info('envd listening', { port: listener.port, host: opts.host });

  return {
    port: listener.port,
    context: ctx,
    processes,
    close: () => listener.close(),
  };
}
