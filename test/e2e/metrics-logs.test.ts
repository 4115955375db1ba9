// Per-sandbox metrics and logs through the e2b SDK and raw HTTP: what the samples hold, start/end filters, the
// batch route, lifecycle events and envd lines in the logs, v1/v2 query parameters, and hostile callers.
import { beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, SandboxNotFoundError } from 'e2b';
import { eventually } from './harness.js';
import { describeNode } from './fixture.js';

const MiB = 1024 * 1024;

interface LogEntry {
  timestamp: string;
  level: string;
  message: string;
  fields: Record<string, string>;
}

describe('sandbox metrics and logs', () => {
  const { server } = describeNode({
    name: 'mlogs',
    toml: '[observability.sandbox_metrics]\ninterval_secs = 1\n',
  });
  let a: Sandbox;
  let b: Sandbox;

  beforeAll(async () => {
    [a, b] = await Promise.all([
      Sandbox.create({ timeoutMs: 300_000 }),
      Sandbox.create({ timeoutMs: 300_000 }),
    ]);
  });

  const raw = (path: string, headers: Record<string, string> = {}) =>
    fetch(`${server.url}${path}`, { headers: { 'x-api-key': server.apiKey, ...headers } });

  it('samples CPU, memory and disk of a running sandbox; the SDK reads them with start/end filters', async () => {
    // Something to see: 64 MiB written (and committed, so the quota group counts it) and a little CPU.
    await a.commands.run(
      'head -c 67108864 /dev/urandom > /home/user/blob && sync && sha256sum /home/user/blob',
    );
    const info = await a.getInfo();
    let metrics: Awaited<ReturnType<Sandbox['getMetrics']>> = [];
    await eventually(
      async () => {
        metrics = await a.getMetrics();
        return metrics.length >= 2 && metrics.at(-1)!.diskUsed >= 64 * MiB;
      },
      'two samples that see the written blob',
      120,
      500,
    );
    const last = metrics.at(-1)!;
    expect(last.cpuCount).toBe(info.cpuCount);
    expect(last.memTotal).toBe(info.memoryMB * MiB);
    expect(last.memUsed).toBeGreaterThan(0);
    expect(last.memUsed).toBeLessThan(last.memTotal);
    expect(last.memCache).toBeGreaterThanOrEqual(0);
    const detail = await server.api('GET', `/sandboxes/${a.sandboxId}`);
    expect(last.diskTotal).toBe(detail.body.diskSizeMB * MiB);
    expect(last.diskUsed).toBeLessThan(last.diskTotal);
    expect(metrics.some((m) => m.cpuUsedPct > 0)).toBe(true);
    for (const m of metrics) expect(m.cpuUsedPct).toBeLessThanOrEqual(100);
    const times = metrics.map((m) => m.timestamp.getTime());
    expect(times).toEqual([...times].sort((x, y) => x - y));

    // The static form, and start/end (unix seconds, inclusive) as the SDK sends them.
    const byId = await Sandbox.getMetrics(a.sandboxId);
    expect(byId.length).toBeGreaterThanOrEqual(metrics.length);
    const first = metrics[0]!.timestamp;
    const onlyFirstSecond = await Sandbox.getMetrics(a.sandboxId, { start: first, end: first });
    expect(onlyFirstSecond.map((m) => Math.floor(m.timestamp.getTime() / 1000))).toEqual(
      onlyFirstSecond.map(() => Math.round(first.getTime() / 1000)),
    );
    expect(await a.getMetrics({ start: new Date(Date.now() + 3600_000) })).toEqual([]);

    // Raw shape: timestamp and timestampUnix name the same second.
    const body = (await (await raw(`/sandboxes/${a.sandboxId}/metrics`)).json()) as Record<string, unknown>[];
    expect(Object.keys(body[0]!).sort()).toEqual(
      [
        'cpuCount',
        'cpuUsedPct',
        'diskTotal',
        'diskUsed',
        'memCache',
        'memTotal',
        'memUsed',
        'timestamp',
        'timestampUnix',
      ].sort(),
    );
    expect(body[0]!.timestampUnix).toBe(Math.floor(Date.parse(body[0]!.timestamp as string) / 1000));
  });

  it('answers the batch form with the latest sample of each named sandbox, and nothing of others', async () => {
    await eventually(async () => (await b.getMetrics()).length > 0, 'a sample of b', 60, 500);
    const unknown = '01234567-89ab-7cde-8f01-23456789abcd';
    const r = await raw(
      `/sandboxes/metrics?sandbox_ids=${a.sandboxId},${unknown}&sandbox_ids=${b.sandboxId}`,
    );
    expect(r.status).toBe(200);
    const { sandboxes } = (await r.json()) as {
      sandboxes: Record<string, { diskUsed: number; cpuCount: number }>;
    };
    expect(Object.keys(sandboxes).sort()).toEqual([a.sandboxId, b.sandboxId].sort());
    // a wrote 64 MiB, b did not: each entry is its own sandbox's.
    expect(sandboxes[a.sandboxId]!.diskUsed).toBeGreaterThan(sandboxes[b.sandboxId]!.diskUsed + 32 * MiB);
    const only = (await (await raw(`/sandboxes/metrics?sandbox_ids=${b.sandboxId}`)).json()) as {
      sandboxes: Record<string, unknown>;
    };
    expect(Object.keys(only.sandboxes)).toEqual([b.sandboxId]);
  });

  it('logs lifecycle events and envd lines; v1 and v2 filter as the SDK and CLI ask', async () => {
    const sbx = await Sandbox.create({ timeoutMs: 300_000 });
    await sbx.pause();
    await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 });
    const v2 = async (q = '') =>
      ((await (await raw(`/v2/sandboxes/${sbx.sandboxId}/logs${q}`)).json()) as { logs: LogEntry[] }).logs;
    const all = await v2();
    const events = all.filter((l) => l.fields.logger === 'lifecycle').map((l) => l.fields.event);
    expect(events).toEqual(['created', 'paused', 'resumed']);
    // envd's own lines (it logs `initialized` on each /init) come from the sandbox's log file, read through envd.
    expect(all.some((l) => l.fields.logger === 'envd' && l.message === 'initialized')).toBe(true);
    const times = all.map((l) => Date.parse(l.timestamp));
    expect(times).toEqual([...times].sort((x, y) => x - y));
    const created = Date.parse(all.find((l) => l.fields.event === 'created')!.timestamp);
    const paused = Date.parse(all.find((l) => l.fields.event === 'paused')!.timestamp);

    // v2: cursor + direction, level, search, limit.
    expect((await v2(`?cursor=${paused}&search=sandbox`)).map((l) => l.fields.event)).toEqual([
      'paused',
      'resumed',
    ]);
    expect(
      (await v2(`?cursor=${paused}&direction=backward&search=sandbox`)).map((l) => l.fields.event),
    ).toEqual(['paused', 'created']);
    expect((await v2('?direction=backward&limit=1&search=resumed')).map((l) => l.fields.event)).toEqual([
      'resumed',
    ]);
    expect((await v2('?level=error')).every((l) => l.level === 'error')).toBe(true);

    // v1 (the CLI's): start in ms, `line` is JSON with level and logger.
    const v1 = (await (await raw(`/sandboxes/${sbx.sandboxId}/logs?start=${created}&limit=2`)).json()) as {
      logs: { timestamp: string; line: string }[];
      logEntries: LogEntry[];
    };
    expect(v1.logs).toHaveLength(2);
    expect(v1.logEntries).toHaveLength(2);
    expect(JSON.parse(v1.logs[0]!.line)).toMatchObject({
      level: 'info',
      logger: 'lifecycle',
      event: 'created',
    });

    // Another sandbox's logs hold none of this one's events.
    const other = ((await (await raw(`/v2/sandboxes/${b.sandboxId}/logs`)).json()) as { logs: LogEntry[] })
      .logs;
    expect(other.filter((l) => l.fields.logger === 'lifecycle').map((l) => l.fields.event)).toEqual([
      'created',
    ]);

    // A killed sandbox: its logs stay readable (with `killed`), its metrics are gone.
    await sbx.kill();
    expect((await v2()).at(-1)!.fields.event).toBe('killed');
    await expect(Sandbox.getMetrics(sbx.sandboxId)).rejects.toThrow(SandboxNotFoundError);
  });

  it('answers hostile callers with 4xx {code, message} and changes nothing', async () => {
    const before = await (await raw(`/v2/sandboxes/${a.sandboxId}/logs`)).json();
    const ids = [
      'not-a-uuid',
      'x'.repeat(2000),
      encodeURIComponent('💥ünï'),
      '%00',
      '..%2F..%2Fetc',
      a.sandboxId.toUpperCase(),
      '01234567-89ab-7cde-8f01-23456789abcd',
    ];
    for (const id of ids) {
      for (const path of [`/sandboxes/${id}/metrics`, `/sandboxes/${id}/logs`, `/v2/sandboxes/${id}/logs`]) {
        const r = await raw(path);
        // An id past the router's parameter limit is 414 URI Too Long; any other unknown id is 404.
        expect(r.status, path).toBe(id.length > 100 ? 414 : 404);
        const body = (await r.json()) as { code: number | string; message: string };
        // The router's 414 carries Fastify's error code (the shared error handler's, not these routes').
        expect(typeof body.message).toBe('string');
        if (r.status === 404) {
          expect(body.code).toBe(404);
          expect(body.message.length).toBeLessThan(200);
        }
      }
    }
    const badQueries = [
      `/sandboxes/${a.sandboxId}/metrics?start=-5`,
      `/sandboxes/${a.sandboxId}/metrics?start=abc`,
      `/sandboxes/${a.sandboxId}/metrics?start=10&end=5`,
      `/sandboxes/${a.sandboxId}/metrics?end=${'9'.repeat(5000)}`,
      `/sandboxes/${a.sandboxId}/logs?limit=1001`,
      `/sandboxes/${a.sandboxId}/logs?start=${encodeURIComponent('💥')}`,
      `/v2/sandboxes/${a.sandboxId}/logs?direction=up`,
      `/v2/sandboxes/${a.sandboxId}/logs?level=trace`,
      `/v2/sandboxes/${a.sandboxId}/logs?search=${'s'.repeat(300)}`,
      `/v2/sandboxes/${a.sandboxId}/logs?cursor=1&cursor=2`,
      '/sandboxes/metrics',
      '/sandboxes/metrics?sandbox_ids=not-a-uuid',
      `/sandboxes/metrics?sandbox_ids=${Array.from({ length: 101 }, () => a.sandboxId).join(',')}`,
    ];
    for (const path of badQueries) {
      const r = await raw(path);
      expect(r.status, path).toBe(400);
      const body = (await r.json()) as { code: number; message: string };
      expect(body.code, path).toBe(400);
      expect(body.message.length, path).toBeLessThan(300);
    }
    for (const path of [
      `/sandboxes/${a.sandboxId}/metrics`,
      `/sandboxes/metrics?sandbox_ids=${a.sandboxId}`,
      `/sandboxes/${a.sandboxId}/logs`,
      `/v2/sandboxes/${a.sandboxId}/logs`,
      '/teams',
    ]) {
      expect((await fetch(`${server.url}${path}`)).status, path).toBe(401);
      expect((await raw(path, { 'x-api-key': 'wrong' })).status, path).toBe(401);
    }
    // Nothing changed: a still runs, its logs are as they were.
    expect(await a.isRunning()).toBe(true);
    expect(await (await raw(`/v2/sandboxes/${a.sandboxId}/logs`)).json()).toEqual(before);
  });
});
