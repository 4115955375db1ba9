#!/usr/bin/env node
// Cluster list fan-out (docs/benchmarks.md#list-fan-out): one real `aenv scheduler` process, one real
// `aenv gateway` process, and --nodes list-serving stand-in nodes (one child process each) holding --sandboxes
// records each. A stand-in is the node's own HTTP front (front-door/http-server.ts: auth, errors, query
// parsing) with the node's own sandbox routes (api/routes/sandboxes.ts: GET /v2/sandboxes with its pagination
// and filters, GET /sandboxes) over an in-memory set of records, and the node's own heartbeat reporter
// (cluster/heartbeat-reporter.ts) with that set as its roster: no runtime, no sandboxes behind the records.
// Each stand-in also serves the route the gateway asks one node per v2 list for the paused sandboxes held by no
// node (api/routes/unheld-sandboxes.ts), over --orphans records that are every stand-in's view of the same shared
// repository (default 0: the request is made and answers nothing).
// Interleaved in one run: one node's list straight (the floor), the gateway's merged list (first page, a full
// walk with limit 100, the SDK's default of no limit) with raw fetch and with the e2b SDK's Sandbox.list()
// paginator, and the same with a metadata filter. Every answer is checked (each record exactly once, in the
// documented order, tokens that name the page's last item and are the same every run). No root; loopback only.
// Needs `npm run build` (the scheduler and gateway run packages/cli/dist).
//
//   node scripts/bench/list-fanout-bench.mjs [--nodes 3] [--sandboxes 300] [--orphans 0] [--runs 20] [--json FILE]
import { execFileSync, fork } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, URLSearchParams } from 'node:url';
import { register } from 'tsx/esm/api';
import { Sandbox } from 'e2b';
import { currentLoad, formatLoad, machineInfo, startLoadSampler } from './lib/host.mjs';
import { fmt, summarize } from './lib/stats.mjs';

register();
const { createSchedulerClient, decodePageToken, timestampNs, NEXT_TOKEN_HEADER } =
  await import('../../packages/protocol/src/index.ts');

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1] : dflt;
};
const bounded = (name, dflt, max) => {
  const n = Number(opt(name, dflt));
  if (!Number.isInteger(n) || n < 1 || n > max) {
    console.error(`${name} must be an integer between 1 and ${max}`);
    process.exit(2);
  }
  return n;
};
const ROLE = opt('--role', 'main');
const NODES = bounded('--nodes', 3, 16);
const SANDBOXES = bounded('--sandboxes', 300, 5000);
const ORPHANS = opt('--orphans', '0') === '0' ? 0 : bounded('--orphans', 0, 5000);
const RUNS = bounded('--runs', 20, 500);
const JSON_OUT = opt('--json', undefined);
const KEY = `e2b_${'f4a0e1'.repeat(10)}`;
const PAGE = 100;
/** The metadata filter of the filtered rows: a quarter of the records match. */
const FILTER = { group: 'g0' };
const BASE_MS = Date.parse('2026-12-01T00:00:00.000Z');

// ---- the records: deterministic, so the parent knows what every node holds --------------------------------
/** A UUID (v4 layout) from a name, so every run lists the same ids. */
function uuidOf(name) {
  const h = createHash('sha256').update(name).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/**
 * Node `i`'s records as the orchestrator keeps them. Global index g = j × NODES + i interleaves the nodes in
 * time, and two consecutive g share a millisecond (createdAt has ms precision on a node), so the merge's
 * tie-break (sandboxID ascending) decides across nodes. Every 10th record is paused; a quarter are group g0.
 */
function recordsOf(i) {
  return Array.from({ length: SANDBOXES }, (_, j) => {
    const g = j * NODES + i;
    return {
      id: uuidOf(`list-fanout-${i}-${j}`),
      templateId: 'base',
      state: g % 10 === 9 ? 'paused' : 'running',
      createdAt: new Date(BASE_MS + Math.floor(g / 2)).toISOString(),
      expiresAt: new Date(BASE_MS + 86_400_000 + g).toISOString(),
      timeoutSecs: 3600,
      resources: { cpuCount: 2, memoryMB: 512, diskSizeMB: 1024 },
      metadata: { bench: 'list-fanout', group: `g${g % 4}`, node: String(i) },
      envVars: {},
      secure: true,
      envdVersion: '0.2.0',
      defaultUser: 'user',
      backend: {},
    };
  });
}

/**
 * The paused sandboxes held by no node, as the shared repository holds them (the same for every stand-in):
 * interleaved in time with the nodes' records, a quarter of them group g0.
 */
function orphanRecords() {
  return Array.from({ length: ORPHANS }, (_, k) => ({
    id: uuidOf(`list-fanout-orphan-${k}`),
    templateId: 'base',
    state: 'paused',
    createdAt: new Date(
      BASE_MS + Math.floor((k * NODES * SANDBOXES) / Math.max(1, ORPHANS) / 2),
    ).toISOString(),
    expiresAt: new Date(BASE_MS + 86_400_000 + k).toISOString(),
    timeoutSecs: 3600,
    resources: { cpuCount: 2, memoryMB: 512, diskSizeMB: 1024 },
    metadata: { bench: 'list-fanout', group: `g${k % 4}`, node: 'none' },
    envVars: {},
    secure: true,
    envdVersion: '0.2.0',
    defaultUser: 'user',
    backend: {},
  }));
}

// ---- role: one stand-in node (a child process) ----------------------------------------------------------
async function runStandIn() {
  const index = Number(opt('--index', 0));
  const { createHttpServer } = await import('../../packages/node/src/front-door/http-server.ts');
  const { registerSandboxRoutes } = await import('../../packages/node/src/api/routes/sandboxes.ts');
  const { registerUnheldSandboxesRoute } =
    await import('../../packages/node/src/api/routes/unheld-sandboxes.ts');
  const { ServerMetrics } = await import('../../packages/node/src/observability/metrics.ts');
  const { HostMetricsSampler } = await import('../../packages/node/src/observability/host-metrics.ts');
  const { resolveNodeIdentity } = await import('../../packages/node/src/identity/node-identity.ts');
  const { startHeartbeatReporter } = await import('../../packages/node/src/cluster/heartbeat-reporter.ts');
  const { createLogger } = await import('../../packages/node/src/util/log.ts');
  const { apiState } = await import('../../packages/node/src/orchestrator/types.ts');

  const logger = createLogger('json', 'warn', process.stderr);
  /** @type {any[]} */
  const records = recordsOf(index);
  const counts = { requests: 0, items: 0, bytes: 0 };
  // Only what the list routes read of the orchestrator; the other routes are registered but never called.
  const orchestrator = /** @type {any} */ ({
    all: () => records,
    listable: () => records,
    expiryOf: (r) => r.expiresAt,
  });
  /** @type {any[]} */
  const orphans = orphanRecords();
  const { app } = createHttpServer({
    apiKey: KEY,
    bodyLimitBytes: 1 << 20,
    logger,
    metrics: new ServerMetrics(),
  });
  registerSandboxRoutes(app, {
    orchestrator,
    tokens: { envd: () => 'unused', traffic: () => 'unused' },
    parsePolicy: () => {
      throw new Error('not served by a list-serving stand-in');
    },
    customExtensionConfigured: false,
    cold: {
      defaults: { cpuCount: 2, memoryMB: 512 },
      launchable: () => Promise.reject(new Error('not served by a list-serving stand-in')),
    },
  });
  registerUnheldSandboxesRoute(app, { unheld: async () => orphans, expiry: (r) => r.expiresAt ?? '' });
  const listRoutes = new Set(['/v2/sandboxes', '/sandboxes', '/cluster/unheld-sandboxes']);
  app.addHook('preSerialization', async (req, _reply, payload) => {
    if (listRoutes.has(req.routeOptions.url ?? '')) {
      counts.requests++;
      if (Array.isArray(payload)) counts.items += payload.length;
    }
    return payload;
  });
  app.addHook('onSend', async (req, _reply, payload) => {
    if (typeof payload === 'string' && listRoutes.has(req.routeOptions.url ?? ''))
      counts.bytes += Buffer.byteLength(payload);
    return payload;
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  const nodeId = `list-node-${index}`;
  /** @type {ReturnType<typeof startHeartbeatReporter> | undefined} */
  let reporter;
  process.on('message', (/** @type {any} */ m) => {
    if (m.type === 'report') {
      const { identity } = resolveNodeIdentity({ node_id: nodeId }, { version: 'list-fanout-bench' });
      const running = records.filter((r) => apiState(r.state) === 'running');
      const paused = records.filter((r) => apiState(r.state) === 'paused');
      reporter = startHeartbeatReporter(
        { endpoint: `http://${m.scheduler}`, intervalMs: 5000 },
        {
          identity,
          counters: () => ({
            sandboxCount: running.length,
            sandboxStartingCount: 0,
            sandboxPausedCount: paused.length,
            allocatedCPU: running.length * 2,
            allocatedMemoryBytes: running.length * 512 * 2 ** 20,
            pausedAllocatedCPU: paused.length * 2,
            pausedAllocatedMemoryBytes: paused.length * 512 * 2 ** 20,
            createSuccesses: records.length,
            createFails: 0,
          }),
          host: new HostMetricsSampler(),
          sandboxes: () => records.map((r) => ({ id: r.id, resources: r.resources })),
          resourcesOf: (id) => records.find((r) => r.id === id)?.resources,
          logger,
        },
      );
    } else if (m.type === 'counts') process.send?.({ type: 'counts', ...counts });
    else if (m.type === 'stop')
      void (async () => {
        await reporter?.close();
        await app.close();
        process.exit(0);
      })();
  });
  process.send?.({ type: 'ready', nodeId, port });
}

// ---- role: main ----------------------------------------------------------------------------------------
/** A stand-in node in its own process (real nodes are other machines: each gets its own event loop). */
async function startStandIn(index) {
  const child = fork(fileURLToPath(import.meta.url), ['--role', 'node', '--index', String(index), ...args], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    // The node's Fastify prints a deprecation warning per process; one per stand-in is noise here.
    execArgv: ['--no-warnings'],
  });
  /** @type {((m: any) => void)[]} */
  const waiting = [];
  child.on('message', (m) => waiting.shift()?.(m));
  const next = () => new Promise((resolve) => waiting.push(resolve));
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const ready = /** @type {{ nodeId: string, port: number }} */ (
    await Promise.race([
      next(),
      exited.then((code) => Promise.reject(new Error(`stand-in node ${index} exited ${code}`))),
    ])
  );
  return {
    pid: child.pid,
    nodeId: ready.nodeId,
    url: `http://127.0.0.1:${ready.port}`,
    report: (scheduler) => child.send({ type: 'report', scheduler }),
    counts: async () => {
      const p = next();
      child.send({ type: 'counts' });
      return /** @type {{ requests: number, items: number, bytes: number }} */ (await p);
    },
    stop: async () => {
      if (child.exitCode === null) child.send({ type: 'stop' });
      await exited;
    },
  };
}

/** The gateway's ListNodes calls so far: count and total seconds (its scheduler RPC histogram). */
async function listNodesCalls(metricsUrl) {
  const text = await (await globalThis.fetch(metricsUrl)).text();
  const pick = (suffix) =>
    Number(
      new RegExp(
        `^agentenv_gateway_scheduler_rpc_duration_seconds_${suffix}\\{rpc="ListNodes",code="ok"\\} (\\S+)$`,
        'm',
      ).exec(text)?.[1] ?? 0,
    );
  return { count: pick('count'), seconds: pick('sum') };
}

/** utime + stime of a process in ms (clock ticks of 10 ms). */
function cpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(stat[11]) + Number(stat[12])) * 10;
}

const byListOrder = (a, b) => {
  const ta = timestampNs(a.startedAt);
  const tb = timestampNs(b.startedAt);
  if (ta !== tb) return ta > tb ? -1 : 1;
  return a.sandboxID < b.sandboxID ? -1 : a.sandboxID > b.sandboxID ? 1 : 0;
};

async function main() {
  const { startSchedulerProcess } = await import('../../packages/scheduler/src/testing/scheduler-process.ts');
  const { startGatewayProcess } = await import('../../packages/gateway/src/testing/gateway-process.ts');
  const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
  const loadAtStart = currentLoad();
  const sampler = startLoadSampler();
  console.log(`load at start ${formatLoad(loadAtStart)}; commit ${commit}`);
  console.log(
    `${NODES} stand-in nodes × ${SANDBOXES} records, ${ORPHANS} held by no node, ${RUNS} runs, page limit ${PAGE}`,
  );

  /** What each node holds, in the wire shape the checks compare with. */
  const held = Array.from({ length: NODES }, (_, i) =>
    recordsOf(i).map((r) => ({
      sandboxID: r.id,
      startedAt: r.createdAt,
      state: r.state,
      metadata: r.metadata,
    })),
  );
  const shared = orphanRecords().map((r) => ({
    sandboxID: r.id,
    startedAt: r.createdAt,
    state: r.state,
    metadata: r.metadata,
  }));
  const all = [...held.flat(), ...shared].sort(byListOrder);
  const expected = {
    all: all.map((r) => r.sandboxID),
    // (v1 lists running sandboxes only; those held by no node are all paused.)
    running: all.filter((r) => r.state === 'running').map((r) => r.sandboxID),
    paused: all.filter((r) => r.state === 'paused').map((r) => r.sandboxID),
    filtered: all.filter((r) => r.metadata.group === FILTER.group).map((r) => r.sandboxID),
    node0: [...held[0]].sort(byListOrder).map((r) => r.sandboxID),
    node0Filtered: [...held[0]]
      .sort(byListOrder)
      .filter((r) => r.metadata.group === FILTER.group)
      .map((r) => r.sandboxID),
  };

  const nodes = [];
  /** @type {any} */
  let sched;
  /** @type {any} */
  let gw;
  /** @type {string[]} */
  const failures = [];
  try {
    for (let i = 0; i < NODES; i++) nodes.push(await startStandIn(i));
    sched = await startSchedulerProcess({
      log_level: 'info',
      scheduler: { nodes: nodes.map((n) => ({ id: n.nodeId, endpoint: n.url })) },
    });
    for (const n of nodes) n.report(sched.grpcAddress);
    gw = await startGatewayProcess({ scheduler_addr: sched.grpcAddress }, KEY);
    const headers = { 'x-api-key': KEY };
    // The gateway sees every node READY (GET /nodes is the scheduler's ListObservedNodes) and its roster
    // bound before anything is measured.
    for (let i = 0; ; i++) {
      const seen = /** @type {{ nodeID: string, status: string }[]} */ (
        await (await globalThis.fetch(`${gw.url}/nodes`, { headers })).json()
      );
      if (seen.filter((n) => n.status === 'ready').length === NODES) break;
      if (i > 100) throw new Error(`the gateway does not see ${NODES} ready nodes: ${JSON.stringify(seen)}`);
      await sleep(100);
    }
    const sdkOpts = { apiKey: KEY, apiUrl: gw.url, debug: false };
    const meta = `metadata=${encodeURIComponent(new URLSearchParams(FILTER).toString())}`;

    /**
     * A list walked page by page with raw fetch: the ids in order, the tokens, and a check of every page
     * (at most `limit`, a full page names the next, a token names its page's last item).
     */
    const fetchWalk = async (base, path, query, limit) => {
      const ids = [];
      const tokens = [];
      let token;
      for (let page = 0; page < 10_000; page++) {
        const q = [
          query,
          limit ? `limit=${limit}` : '',
          token ? `nextToken=${encodeURIComponent(token)}` : '',
        ]
          .filter(Boolean)
          .join('&');
        const r = await globalThis.fetch(`${base}${path}${q ? `?${q}` : ''}`, { headers });
        if (r.status !== 200) throw new Error(`${path}?${q}: ${r.status} ${await r.text()}`);
        const items = /** @type {{ sandboxID: string, startedAt: string }[]} */ (await r.json());
        ids.push(...items.map((s) => s.sandboxID));
        token = r.headers.get(NEXT_TOKEN_HEADER) ?? undefined;
        if (limit && items.length > limit)
          failures.push(`${path}: a page of ${items.length} > limit ${limit}`);
        // The gateway, as the reference, names a next page after every full one (docs/cluster.md).
        if (base === gw.url && limit && items.length === limit && !token)
          failures.push(`${path}?${q}: a full page of the gateway without a next token`);
        if (token) {
          const last = items[items.length - 1];
          const c = decodePageToken(token);
          if (!last || c.id !== last.sandboxID || c.timeNs !== timestampNs(last.startedAt))
            failures.push(`${path}?${q}: the next token does not name the page's last item`);
          tokens.push(token);
        }
        if (!token || !limit) break;
      }
      return { ids, tokens };
    };
    const sdkWalk = async (limit, query) => {
      const paginator = Sandbox.list({
        ...sdkOpts,
        ...(limit ? { limit } : {}),
        ...(query ? { query } : {}),
      });
      const ids = [];
      const tokens = [];
      while (paginator.hasNext) {
        const items = await paginator.nextItems();
        ids.push(...items.map((s) => s.sandboxId));
        if (paginator.nextToken) tokens.push(paginator.nextToken);
      }
      return { ids, tokens };
    };

    const node0 = nodes[0].url;
    const schedulerClient = createSchedulerClient(sched.grpcAddress);
    /** @type {{ id: string, label: string, expect: string[], limit?: number, run: () => Promise<{ ids: string[], tokens: string[] }> }[]} */
    const rows = [
      {
        // What the gateway does first for every list request.
        id: 'sched.listNodes',
        label: 'scheduler: ListNodes round trip (from here)',
        expect: nodes.map((n) => n.nodeId),
        run: async () => ({
          ids: (await schedulerClient.listNodes({})).nodes.map((n) => n.nodeId),
          tokens: [],
        }),
      },
      {
        id: 'node.all',
        label: 'node: GET /v2/sandboxes, all (one node)',
        expect: expected.node0,
        run: () => fetchWalk(node0, '/v2/sandboxes', '', 0),
      },
      {
        id: 'node.page',
        label: `node: first page, limit ${PAGE}`,
        expect: expected.node0.slice(0, PAGE),
        run: () => firstPage(node0, ''),
      },
      {
        id: 'node.walk',
        label: `node: full walk, limit ${PAGE}`,
        expect: expected.node0,
        limit: PAGE,
        run: () => fetchWalk(node0, '/v2/sandboxes', '', PAGE),
      },
      {
        id: 'gw.page',
        label: `gateway: first page, limit ${PAGE}`,
        expect: expected.all.slice(0, PAGE),
        run: () => firstPage(gw.url, ''),
      },
      {
        id: 'gw.walk',
        label: `gateway: full walk, limit ${PAGE} (fetch)`,
        expect: expected.all,
        limit: PAGE,
        run: () => fetchWalk(gw.url, '/v2/sandboxes', '', PAGE),
      },
      {
        id: 'gw.walk.sdk',
        label: `gateway: full walk, limit ${PAGE} (SDK)`,
        expect: expected.all,
        limit: PAGE,
        run: () => sdkWalk(PAGE),
      },
      {
        id: 'gw.all',
        label: 'gateway: all, no limit (fetch)',
        expect: expected.all,
        run: () => fetchWalk(gw.url, '/v2/sandboxes', '', 0),
      },
      {
        id: 'gw.all.sdk',
        label: 'gateway: Sandbox.list() default (SDK)',
        expect: expected.all,
        run: () => sdkWalk(0),
      },
      {
        id: 'gw.v1',
        label: 'gateway: GET /sandboxes (v1, running)',
        expect: expected.running,
        run: () => fetchWalk(gw.url, '/sandboxes', '', 0),
      },
      {
        id: 'node.meta',
        label: 'node: all, metadata filter',
        expect: expected.node0Filtered,
        run: () => fetchWalk(node0, '/v2/sandboxes', meta, 0),
      },
      {
        id: 'gw.meta.page',
        label: `gateway: first page, limit ${PAGE}, metadata`,
        expect: expected.filtered.slice(0, PAGE),
        run: () => firstPage(gw.url, meta),
      },
      {
        id: 'gw.meta.walk',
        label: `gateway: full walk, limit ${PAGE}, metadata (fetch)`,
        expect: expected.filtered,
        limit: PAGE,
        run: () => fetchWalk(gw.url, '/v2/sandboxes', meta, PAGE),
      },
      {
        id: 'gw.meta.walk.sdk',
        label: `gateway: full walk, limit ${PAGE}, metadata (SDK)`,
        expect: expected.filtered,
        limit: PAGE,
        run: () => sdkWalk(PAGE, { metadata: FILTER }),
      },
      {
        id: 'gw.meta.all.sdk',
        label: 'gateway: Sandbox.list() default, metadata (SDK)',
        expect: expected.filtered,
        run: () => sdkWalk(0, { metadata: FILTER }),
      },
    ];
    async function firstPage(base, query) {
      const r = await globalThis.fetch(`${base}/v2/sandboxes?${query ? `${query}&` : ''}limit=${PAGE}`, {
        headers,
      });
      if (r.status !== 200) throw new Error(`first page: ${r.status} ${await r.text()}`);
      const items = /** @type {{ sandboxID: string }[]} */ (await r.json());
      const token = r.headers.get(NEXT_TOKEN_HEADER);
      return { ids: items.map((s) => s.sandboxID), tokens: token ? [token] : [] };
    }

    // Checks that are not timed: a state filter, and the same tokens from the SDK as from fetch.
    const paused = await fetchWalk(gw.url, '/v2/sandboxes', 'state=paused', PAGE);
    if (paused.ids.join() !== expected.paused.join())
      failures.push('state=paused walk: not the paused records in order');
    // A token from a node's own page works at the gateway: it continues after that node's last item.
    const nodePage = await globalThis.fetch(`${node0}/v2/sandboxes?limit=${PAGE}`, { headers });
    const nodeToken = nodePage.headers.get(NEXT_TOKEN_HEADER) ?? '';
    const cursor = decodePageToken(nodeToken);
    const afterCursor = all.filter((r) => {
      const t = timestampNs(r.startedAt);
      return t < cursor.timeNs || (t === cursor.timeNs && r.sandboxID > cursor.id);
    });
    const fromNodeToken = await globalThis.fetch(
      `${gw.url}/v2/sandboxes?limit=${PAGE}&nextToken=${encodeURIComponent(nodeToken)}`,
      { headers },
    );
    const continued = /** @type {{ sandboxID: string }[]} */ (await fromNodeToken.json());
    if (
      continued.map((s) => s.sandboxID).join() !==
      afterCursor
        .slice(0, PAGE)
        .map((r) => r.sandboxID)
        .join()
    )
      failures.push("a node's token at the gateway: not the page after that node's last item");
    const bad = await globalThis.fetch(`${gw.url}/v2/sandboxes?state=sleeping`, { headers });
    if (bad.status !== 400) failures.push(`state=sleeping: ${bad.status}, not the node's 400`);

    /** @type {Map<string, { ms: number[], gatewayCpuMs: number, nodeRequests: number, nodeItems: number, nodeBytes: number, tokens?: string }>} */
    const results = new Map(
      rows.map((r) => [r.id, { ms: [], gatewayCpuMs: 0, nodeRequests: 0, nodeItems: 0, nodeBytes: 0 }]),
    );
    const result = (id) => {
      const r = results.get(id);
      if (!r) throw new Error(`no row ${id}`);
      return r;
    };
    const nodeCounts = async () => {
      const c = await Promise.all(nodes.map((n) => n.counts()));
      return c.reduce((a, b) => ({
        requests: a.requests + b.requests,
        items: a.items + b.items,
        bytes: a.bytes + b.bytes,
      }));
    };
    // One warm-up round (connections, JIT), not counted, then the runs, each row once per run in a rotated order.
    for (const row of rows) await row.run();
    const listNodesBefore = await listNodesCalls(gw.metricsUrl);
    for (let run = 0; run < RUNS; run++) {
      for (let k = 0; k < rows.length; k++) {
        const row = rows[(k + run) % rows.length];
        const res = result(row.id);
        const before = await nodeCounts();
        const cpu0 = cpuMs(gw.pid);
        const t = performance.now();
        const got = await row.run();
        res.ms.push(performance.now() - t);
        res.gatewayCpuMs += cpuMs(gw.pid) - cpu0;
        const after = await nodeCounts();
        res.nodeRequests += after.requests - before.requests;
        res.nodeItems += after.items - before.items;
        res.nodeBytes += after.bytes - before.bytes;
        if (got.ids.join() !== row.expect.join()) {
          const dupes = got.ids.length - new Set(got.ids).size;
          failures.push(
            `${row.label}, run ${run}: ${got.ids.length} records (${dupes} repeated), expected ${row.expect.length} in the documented order`,
          );
        }
        const tokens = got.tokens.join(',');
        if (res.tokens === undefined) res.tokens = tokens;
        else if (res.tokens !== tokens)
          failures.push(`${row.label}, run ${run}: other next tokens than the first run`);
      }
    }
    if (result('gw.walk').tokens !== result('gw.walk.sdk').tokens)
      failures.push('the SDK paginator saw other tokens than raw fetch');
    const load = sampler.stop();
    // Every cluster-list request starts with a ListNodes round trip (plus the gateway's own health refresh,
    // one a second).
    const listNodesAfter = await listNodesCalls(gw.metricsUrl);
    const listNodes = {
      calls: listNodesAfter.count - listNodesBefore.count,
      meanMs:
        ((listNodesAfter.seconds - listNodesBefore.seconds) * 1000) /
        Math.max(1, listNodesAfter.count - listNodesBefore.count),
    };

    const report = rows.map((row) => {
      const r = result(row.id);
      return {
        id: row.id,
        label: row.label,
        records: row.expect.length,
        ms: /** @type {import('./lib/stats.mjs').Summary} */ (summarize(r.ms)),
        perRun: {
          nodeRequests: r.nodeRequests / RUNS,
          nodeItemsServed: r.nodeItems / RUNS,
          nodeBytesServed: r.nodeBytes / RUNS,
          gatewayCpuMs: row.id.startsWith('gw') ? r.gatewayCpuMs / RUNS : null,
        },
      };
    });
    console.log(
      `\n${'row'.padEnd(50)} ${'records'.padStart(7)}  ${'min / median / p95 ms'.padEnd(24)} node reqs  node items  gw CPU ms`,
    );
    for (const r of report)
      console.log(
        `${r.label.padEnd(50)} ${String(r.records).padStart(7)}  ${`${fmt(r.ms.min)} / ${fmt(r.ms.median)} / ${fmt(r.ms.p95)}`.padEnd(24)} ${fmt(r.perRun.nodeRequests).padStart(9)}  ${String(Math.round(r.perRun.nodeItemsServed)).padStart(10)}  ${r.perRun.gatewayCpuMs === null ? '-' : fmt(r.perRun.gatewayCpuMs)}`,
      );
    console.log(
      `\ngateway → scheduler ListNodes (once per list request): mean ${fmt(listNodes.meanMs)} ms over ${listNodes.calls} calls`,
    );
    console.log(
      `load during the run: min ${load.min.toFixed(2)}, mean ${load.mean.toFixed(2)}, max ${load.max.toFixed(2)} (1-min average)`,
    );
    console.log(failures.length === 0 ? 'checks: all passed' : `checks: ${failures.length} FAILED`);
    for (const f of failures.slice(0, 20)) console.log(`  ${f}`);
    if (JSON_OUT)
      writeFileSync(
        JSON_OUT,
        JSON.stringify(
          {
            date: new Date().toISOString(),
            commit,
            machine: machineInfo(),
            loadAtStart,
            loadDuring: load,
            options: {
              nodes: NODES,
              sandboxes: SANDBOXES,
              orphans: ORPHANS,
              runs: RUNS,
              pageLimit: PAGE,
              filter: FILTER,
            },
            rows: report,
            listNodes,
            failures,
          },
          null,
          2,
        ),
      );
  } finally {
    await gw?.stop();
    await Promise.all(nodes.map((n) => n.stop()));
    await sched?.stop();
  }
  process.exitCode = failures.length === 0 ? 0 : 1;
}

if (ROLE === 'node') await runStandIn();
else await main();
