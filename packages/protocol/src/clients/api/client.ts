// A typed client of the aenv control plane (the E2B API plus aenv's fork, snapshots, network, nodes): what the
// CLI and the gateway call a node with. One method per route; answers typed with `api/responses.ts`; every
// non-2xx answer is thrown as an AenvApiError carrying the status and the `{code, message}` body.
import { API_KEY_HEADER } from '../../api/headers.js';
import { NEXT_TOKEN_HEADER, type PageOrder } from '../../api/pagination.js';
import type {
  AssignedTemplateTags,
  ForkResult,
  ListedSandbox,
  NodeDetail,
  NodeDrainProgress,
  NodeResponse,
  SandboxDetail,
  SandboxesWithMetrics,
  SandboxLogLevel,
  SandboxLogsV1,
  SandboxLogsV2,
  SandboxMetric,
  SandboxResponse,
  SandboxState,
  SnapshotInfo,
  TeamResponse,
  TemplateAliasResponse,
  TemplateBuildInfo,
  TemplateBuildRequested,
  TemplateFilesUpload,
  TemplateResponse,
  TemplateTag,
  TemplateWithBuilds,
} from '../../api/responses.js';
import type {
  AssignTemplateTags,
  ConnectSandboxV2,
  DeleteTemplateTags,
  ForkRequest,
  NetworkUpdate,
  NewColdSandbox,
  NewSandbox,
  PauseRequest,
  ResumedSandbox,
  SnapshotRequest,
  TemplateBuildRequestV3,
  TemplateBuildStartV2,
  TemplateUpdate,
} from '../../api/schemas.js';
import type {
  WebhookCreate,
  WebhookDeliveries,
  WebhookDeliveriesQuery,
  WebhookDeliveryStats,
  WebhookDetail,
  WebhookUpdate,
} from '../../api/webhooks.js';
import { AenvApiError, AenvApiUnreachableError } from './errors.js';

export interface AenvApiClientOptions {
  /** The node (or gateway): `http://host:port`, optionally with a path prefix. */
  baseUrl: string;
  apiKey: string;
  /** How long one call may take before it is abandoned (default 10 minutes: a pause or build request is slow). */
  timeoutMs?: number;
  /** Sent with every call (e.g. a gateway's request id). */
  headers?: Record<string, string>;
}

/** One page of a list and the token of the next one (absent on the last page). */
export interface Page<T> {
  items: T[];
  nextToken?: string;
}

export interface PageQuery {
  limit?: number;
  nextToken?: string;
}

export interface SandboxListQuery extends PageQuery {
  /** Sandboxes whose metadata has every one of these pairs. */
  metadata?: Record<string, string>;
  state?: SandboxState[];
  order?: PageOrder;
  /** Template id or alias. */
  template?: string;
  /** RFC3339: only sandboxes started at or after it. */
  startedAfter?: string;
}

export interface SandboxLogsQuery {
  /** Unix ms. */
  cursor?: number;
  direction?: 'forward' | 'backward';
  level?: SandboxLogLevel;
  search?: string;
  limit?: number;
}

export interface BuildStatusQuery {
  logsOffset?: number;
  limit?: number;
  level?: SandboxLogLevel;
}

type Query = Record<string, string | number | undefined>;

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

/** The metadata filter as the e2b SDK encodes it (each pair escaped, then joined as a query string). */
function metadataFilter(metadata: Record<string, string>): string {
  const pairs = Object.entries(metadata).map(([k, v]) => [encodeURIComponent(k), encodeURIComponent(v)]);
  return new URLSearchParams(Object.fromEntries(pairs)).toString();
}

const seg = (s: string) => encodeURIComponent(s);

export class AenvApiClient {
  private readonly base: string;

  constructor(private readonly opts: AenvApiClientOptions) {
    this.base = opts.baseUrl.replace(/\/+$/, '');
  }

  /** Calls `method path`; any answer that is not 2xx throws AenvApiError. */
  async call(method: string, path: string, opts: { body?: unknown; query?: Query } = {}): Promise<Answer> {
    const url = new URL(`${this.base}${path}`);
    for (const [k, v] of Object.entries(opts.query ?? {})) {
      if (v !== undefined && v !== '') url.searchParams.set(k, String(v));
    }
    const what = `${method} ${path}`;
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers: {
          ...this.opts.headers,
          [API_KEY_HEADER]: this.opts.apiKey,
          ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}),
        signal: AbortSignal.timeout(this.opts.timeoutMs ?? 600_000),
      });
    } catch (e) {
      throw new AenvApiUnreachableError(what, { cause: e });
    }
    const text = await res.text();
    if (res.status < 200 || res.status >= 300) throw AenvApiError.fromAnswer(res.status, text, what);
    return { status: res.status, headers: res.headers, text };
  }

  private async json<T>(
    method: string,
    path: string,
    opts: { body?: unknown; query?: Query } = {},
  ): Promise<T> {
    const r = await this.call(method, path, opts);
    return JSON.parse(r.text) as T;
  }

  private async page<T>(path: string, query: Query): Promise<Page<T>> {
    const r = await this.call('GET', path, { query });
    const nextToken = r.headers.get(NEXT_TOKEN_HEADER);
    return { items: JSON.parse(r.text) as T[], ...(nextToken ? { nextToken } : {}) };
  }

  readonly sandboxes = {
    /** `POST /v2/sandboxes` (as the e2b SDK creates: always secured). */
    create: (body: NewSandbox) => this.json<SandboxResponse>('POST', '/v2/sandboxes', { body }),
    /** `POST /sandboxes`: secured only when `secure` says so (the reference CLI's `start`). */
    createV1: (body: NewSandbox) => this.json<SandboxResponse>('POST', '/sandboxes', { body }),
    /** `POST /sandboxes-cold` (AgentENV): a sandbox booted from an OCI image, with its own resources. */
    createCold: (body: NewColdSandbox) => this.json<SandboxResponse>('POST', '/sandboxes-cold', { body }),
    /** `GET /v2/sandboxes`: running and paused sandboxes, newest first unless `order: 'asc'`. */
    list: (q: SandboxListQuery = {}) =>
      this.page<ListedSandbox>('/v2/sandboxes', {
        metadata: q.metadata ? metadataFilter(q.metadata) : undefined,
        state: q.state?.join(','),
        order: q.order,
        template: q.template,
        startedAfter: q.startedAfter,
        limit: q.limit,
        nextToken: q.nextToken,
      }),
    get: (id: string) => this.json<SandboxDetail>('GET', `/sandboxes/${seg(id)}`),
    kill: async (id: string): Promise<void> => void (await this.call('DELETE', `/sandboxes/${seg(id)}`)),
    /** Sets the sandbox to end `timeoutSecs` from now. */
    setTimeout: async (id: string, timeoutSecs: number): Promise<void> =>
      void (await this.call('POST', `/sandboxes/${seg(id)}/timeout`, { body: { timeout: timeoutSecs } })),
    refresh: async (id: string, durationSecs?: number): Promise<void> =>
      void (await this.call('POST', `/sandboxes/${seg(id)}/refreshes`, {
        body: durationSecs === undefined ? {} : { duration: durationSecs },
      })),
    pause: async (id: string, body: PauseRequest = {}): Promise<void> =>
      void (await this.call('POST', `/sandboxes/${seg(id)}/pause`, { body })),
    /** `POST /v2/sandboxes/{id}/connect`: `resumed` when the sandbox was paused (201) rather than running (200). */
    connect: async (
      id: string,
      body: ConnectSandboxV2 = {},
    ): Promise<{ sandbox: SandboxResponse; resumed: boolean }> => {
      const r = await this.call('POST', `/v2/sandboxes/${seg(id)}/connect`, { body });
      return { sandbox: JSON.parse(r.text) as SandboxResponse, resumed: r.status === 201 };
    },
    /** Deprecated `POST /sandboxes/{id}/resume`. */
    resume: (id: string, body: ResumedSandbox = {}) =>
      this.json<SandboxResponse>('POST', `/sandboxes/${seg(id)}/resume`, { body }),
    fork: (id: string, body: ForkRequest = {}) =>
      this.json<ForkResult[]>('POST', `/sandboxes/${seg(id)}/fork`, { body }),
    snapshot: (id: string, body: SnapshotRequest = {}) =>
      this.json<SnapshotInfo>('POST', `/sandboxes/${seg(id)}/snapshots`, { body }),
    updateNetwork: async (id: string, body: NetworkUpdate): Promise<void> =>
      void (await this.call('PUT', `/sandboxes/${seg(id)}/network`, { body })),
    /** Samples between `start` and `end` (unix seconds, inclusive). */
    metrics: (id: string, range: { start?: number; end?: number } = {}) =>
      this.json<SandboxMetric[]>('GET', `/sandboxes/${seg(id)}/metrics`, { query: range }),
    /** The latest sample of each of `ids` that has one. */
    latestMetrics: (ids: string[]) =>
      this.json<SandboxesWithMetrics>('GET', '/sandboxes/metrics', { query: { sandbox_ids: ids.join(',') } }),
    logs: (id: string, q: SandboxLogsQuery = {}) =>
      this.json<SandboxLogsV2>('GET', `/v2/sandboxes/${seg(id)}/logs`, { query: { ...q } }),
    /** v1 logs: lines at or after `start` (unix ms). */
    logsV1: (id: string, q: { start?: number; limit?: number } = {}) =>
      this.json<SandboxLogsV1>('GET', `/sandboxes/${seg(id)}/logs`, { query: q }),
  };

  readonly templates = {
    list: (q: PageQuery = {}) => this.page<TemplateResponse>('/v2/templates', { ...q }),
    get: (idOrAlias: string) => this.json<TemplateWithBuilds>('GET', `/templates/${seg(idOrAlias)}`),
    delete: async (idOrAlias: string): Promise<void> =>
      void (await this.call('DELETE', `/templates/${seg(idOrAlias)}`)),
    /** `GET /templates/aliases/{alias}` (`name` or `name:tag`). */
    byAlias: (alias: string) => this.json<TemplateAliasResponse>('GET', `/templates/aliases/${seg(alias)}`),
    /** `POST /v3/templates`: registers the template and its build; `startBuild` starts it. */
    requestBuild: (body: TemplateBuildRequestV3) =>
      this.json<TemplateBuildRequested>('POST', '/v3/templates', { body }),
    startBuild: async (templateId: string, buildId: string, body: TemplateBuildStartV2): Promise<void> =>
      void (await this.call('POST', `/v2/templates/${seg(templateId)}/builds/${seg(buildId)}`, { body })),
    buildStatus: (templateId: string, buildId: string, q: BuildStatusQuery = {}) =>
      this.json<TemplateBuildInfo>('GET', `/templates/${seg(templateId)}/builds/${seg(buildId)}/status`, {
        query: { ...q },
      }),
    /** Where to upload the files of a COPY step with this hash (`present` when the node has them). */
    filesUpload: (templateId: string, hash: string) =>
      this.json<TemplateFilesUpload>('GET', `/templates/${seg(templateId)}/files/${seg(hash)}`),
    tags: (idOrAlias: string) => this.json<TemplateTag[]>('GET', `/templates/${seg(idOrAlias)}/tags`),
    assignTags: (body: AssignTemplateTags) =>
      this.json<AssignedTemplateTags>('POST', '/templates/tags', { body }),
    removeTags: async (body: DeleteTemplateTags): Promise<void> =>
      void (await this.call('DELETE', '/templates/tags', { body })),
    update: (idOrAlias: string, body: TemplateUpdate) =>
      this.json<{ names: string[] }>('PATCH', `/v2/templates/${seg(idOrAlias)}`, { body }),
  };

  readonly snapshots = {
    list: (q: PageQuery & { sandboxID?: string; name?: string } = {}) =>
      this.page<SnapshotInfo>('/snapshots', { ...q }),
    get: (idOrName: string) => this.json<SnapshotInfo>('GET', `/snapshots/${seg(idOrName)}`),
    /** A snapshot is deleted as the template it also is (`DELETE /templates/{id}`, as the e2b SDK does). */
    delete: async (id: string): Promise<void> => void (await this.call('DELETE', `/templates/${seg(id)}`)),
  };

  readonly nodes = {
    list: () => this.json<NodeResponse[]>('GET', '/nodes'),
    get: (nodeId: string) => this.json<NodeDetail>('GET', `/nodes/${seg(nodeId)}`),
    /** aenv's drain (docs/cluster.md#draining): 202 with the progress; repeating it joins the same drain. */
    drain: (nodeId: string) =>
      this.json<NodeDrainProgress>('POST', `/nodes/${seg(nodeId)}/drain`, { body: {} }),
  };

  readonly teams = {
    list: () => this.json<TeamResponse[]>('GET', '/teams'),
  };

  /** E2B's webhooks API (docs/events.md#webhooks); through a gateway, for every node of the cluster. */
  readonly webhooks = {
    create: (body: WebhookCreate) => this.json<WebhookDetail>('POST', '/events/webhooks', { body }),
    list: () => this.json<WebhookDetail[]>('GET', '/events/webhooks'),
    get: (id: string) => this.json<WebhookDetail>('GET', `/events/webhooks/${seg(id)}`),
    update: (id: string, body: WebhookUpdate) =>
      this.json<WebhookDetail>('PATCH', `/events/webhooks/${seg(id)}`, { body }),
    delete: async (id: string): Promise<void> =>
      void (await this.call('DELETE', `/events/webhooks/${seg(id)}`)),
    /** One page of the delivery history, grouped by event; pass `nextCursor` back as `cursor`. */
    deliveries: (id: string, q: WebhookDeliveriesQuery = {}) => {
      const p = new URLSearchParams();
      if (q.limit !== undefined) p.set('limit', String(q.limit));
      if (q.cursor) p.set('cursor', q.cursor);
      if (q.orderAsc !== undefined) p.set('orderAsc', String(q.orderAsc));
      for (const s of q.deliveryStatus ?? []) p.append('deliveryStatus', s);
      for (const t of q.eventType ?? []) p.append('eventType', t);
      if (q.start) p.set('start', q.start);
      if (q.end) p.set('end', q.end);
      const query = p.toString();
      return this.json<WebhookDeliveries>(
        'GET',
        `/events/webhooks/${seg(id)}/deliveries${query ? `?${query}` : ''}`,
      );
    },
    stats: (id: string, q: { start?: string; end?: string } = {}) =>
      this.json<WebhookDeliveryStats>('GET', `/events/webhooks/${seg(id)}/stats`, { query: q }),
  };
}
