import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { NodeStatus, SandboxEventType } from '@aenv/protocol';
import { createLogger } from '../util/log.js';
import { startHeartbeatReporter, type HeartbeatReporter, type ReporterClient } from './heartbeat-reporter.js';
import type { HeartbeatInit } from './node-figures.js';
import type { SandboxEventInit } from './sandbox-events.js';

const identity = {
  nodeId: 'node-a',
  clusterId: '00000000-0000-0000-0000-000000000000',
  serviceInstanceId: 'inst-1',
  version: '0.1.0',
  commit: 'abc',
  machineInfo: { cpuFamily: '6', cpuModel: '85', cpuModelName: 'Xeon', cpuArchitecture: 'x86_64' },
};
const counters = {
  sandboxCount: 1,
  sandboxStartingCount: 0,
  sandboxPausedCount: 0,
  allocatedCPU: 2,
  allocatedMemoryBytes: 512 * 1024 ** 2,
  pausedAllocatedCPU: 0,
  pausedAllocatedMemoryBytes: 0,
  createSuccesses: 1,
  createFails: 0,
};
const host = {
  sample: async () => ({ cpuPercent: 1, cpuCount: 4, memoryUsedBytes: 1, memoryTotalBytes: 2, disks: [] }),
};
const res = { cpuCount: 2, memoryMB: 512, diskSizeMB: 1024 };

/** A scheduler the test switches off and on; it records what it was sent. */
function scheduler() {
  const s = {
    up: true,
    heartbeats: [] as HeartbeatInit[],
    failedBeats: 0,
    /** While set, a heartbeat waits for it before the scheduler takes it (one in flight). */
    hold: undefined as Promise<void> | undefined,
    events: [] as SandboxEventInit[],
    unregistered: [] as unknown[],
    client: {} as ReporterClient,
  };
  const refuse = () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:1'));
  s.client = {
    heartbeat: (async (req: HeartbeatInit) => {
      if (!s.up) {
        s.failedBeats++;
        return refuse();
      }
      if (s.hold) await s.hold;
      s.heartbeats.push(req);
      return {};
    }) as unknown as ReporterClient['heartbeat'],
    reportSandboxEvent: (async (req: { events: SandboxEventInit[] }) => {
      if (!s.up) return refuse();
      s.events.push(...req.events);
      return {};
    }) as unknown as ReporterClient['reportSandboxEvent'],
    unregisterNode: (async (req: unknown) => {
      if (!s.up) return refuse();
      s.unregistered.push(req);
      return {};
    }) as unknown as ReporterClient['unregisterNode'],
  };
  return s;
}

function logCapture() {
  const lines: { msg: string }[] = [];
  const logger = createLogger(
    'json',
    'info',
    new Writable({
      write(chunk: Buffer, _e, cb) {
        for (const l of chunk.toString().split('\n')) if (l) lines.push(JSON.parse(l) as { msg: string });
        cb();
      },
    }),
  );
  return { logger, count: (re: RegExp) => lines.filter((l) => re.test(l.msg)).length };
}

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (check()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`never: ${what}`);
}

let reporter: HeartbeatReporter | undefined;
afterEach(async () => {
  await reporter?.close();
  reporter = undefined;
});

function start(
  s: ReturnType<typeof scheduler>,
  log = logCapture(),
  roster = ['sbx1'],
  takingOver: string[] = [],
  intervalMs = 10,
) {
  reporter = startHeartbeatReporter(
    { endpoint: 'http://127.0.0.1:1', intervalMs },
    {
      identity,
      counters: () => counters,
      host,
      sandboxes: () => roster.map((id) => ({ id, resources: res })),
      takingOver: () => takingOver,
      resourcesOf: (id) => (roster.includes(id) ? res : undefined),
      logger: log.logger,
      client: s.client,
      jitter: () => 1,
    },
  );
  return reporter;
}

describe('heartbeat reporter', () => {
  it('registers at once with identity, figures and roster, then beats every interval', async () => {
    const s = scheduler();
    const log = logCapture();
    start(s, log);
    await until(() => s.heartbeats.length >= 3, 'three heartbeats');
    const hb = s.heartbeats[0]!;
    expect(hb).toMatchObject({
      nodeId: 'node-a',
      serviceInstanceId: 'inst-1',
      version: '0.1.0',
      commit: 'abc',
      machineInfo: { cpuModelName: 'Xeon', cpuArchitecture: 'x86_64', cpuConfigJson: '' },
      sandboxIds: ['sbx1'],
      snapshot: { status: NodeStatus.READY, allocatedCpu: 2, cpuCount: 4, sandboxCount: 1 },
    });
    expect(log.count(/^registered with the scheduler$/)).toBe(1);
  });

  it('names the sandboxes being taken over in its roster too, once each', async () => {
    const s = scheduler();
    const takingOver = ['sbx-moving', 'sbx1'];
    start(s, logCapture(), ['sbx1'], takingOver);
    await until(() => s.heartbeats.length >= 1, 'a heartbeat');
    expect(s.heartbeats[0]!.sandboxIds).toEqual(['sbx1', 'sbx-moving']);
    takingOver.length = 0;
    const n = s.heartbeats.length;
    await until(() => s.heartbeats.length > n, 'the next heartbeat');
    expect(s.heartbeats.at(-1)!.sandboxIds).toEqual(['sbx1']);
  });

  it('logs an outage once, backs off, and sends what was queued when the scheduler is back', async () => {
    const s = scheduler();
    const log = logCapture();
    const r = start(s, log);
    await until(() => s.heartbeats.length >= 1, 'registration');
    s.up = false;
    await until(() => s.failedBeats >= 4, 'four failed heartbeats');
    // Events during the outage are queued; pushing never throws nor waits on the scheduler.
    r.onLifecycle({ sandboxId: 'sbx1', event: 'paused', level: 'info', message: '' });
    r.onLifecycle({ sandboxId: 'gone', event: 'killed', level: 'info', message: '' });
    r.onLifecycle({ sandboxId: 'sbx1', event: 'forked', level: 'info', message: '' });
    expect(log.count(/^scheduler unreachable/)).toBe(1);
    const beatsBefore = s.heartbeats.length;
    s.up = true;
    await until(() => s.events.length >= 2, 'queued events to arrive');
    expect(s.heartbeats.length).toBeGreaterThan(beatsBefore);
    expect(s.events.map((e) => [e.sandboxId, e.eventType])).toEqual([
      ['sbx1', SandboxEventType.PAUSE],
      ['gone', SandboxEventType.DELETE],
    ]);
    expect(s.events[0]).toMatchObject({ requestedCpu: 2, requestedMemoryBytes: 512n * 1024n * 1024n });
    expect(log.count(/^scheduler unreachable/)).toBe(1);
    expect(log.count(/^scheduler reachable again/)).toBe(1);
  });

  it('remembers the resources of a sandbox for its DELETE, sent after its record is gone', async () => {
    const s = scheduler();
    const roster = ['sbx9'];
    const r = start(s, logCapture(), roster);
    await until(() => s.heartbeats.length >= 1, 'registration');
    r.onLifecycle({ sandboxId: 'sbx9', event: 'created', level: 'info', message: '' });
    roster.length = 0;
    r.onLifecycle({ sandboxId: 'sbx9', event: 'killed', level: 'info', message: '' });
    await until(() => s.events.length >= 2, 'both events');
    expect(s.events[1]).toMatchObject({ eventType: SandboxEventType.DELETE, requestedCpu: 2 });
  });

  it('says LINGERING when draining and unregisters on close', async () => {
    const s = scheduler();
    const r = start(s);
    await until(() => s.heartbeats.length >= 1, 'registration');
    await r.drain();
    expect(s.heartbeats.at(-1)?.snapshot?.status).toBe(NodeStatus.LINGERING);
    await r.close();
    expect(s.unregistered).toEqual([{ nodeId: 'node-a', serviceInstanceId: 'inst-1' }]);
    const n = s.heartbeats.length;
    await new Promise((res) => setTimeout(res, 50));
    expect(s.heartbeats.length).toBe(n);
  });

  it('drain and report send a heartbeat built after them, not the one in flight: LINGERING, the roster as it is now', async () => {
    const s = scheduler();
    const roster = ['sbx1', 'sbx2', 'sbx3'];
    const r = start(s, logCapture(), roster, [], 60_000);
    await until(() => s.heartbeats.length === 1, 'registration');
    /** A heartbeat on its way to the scheduler (READY, the roster as it was) while `change` happens. */
    const whileOneIsInFlight = async (change: () => Promise<void>) => {
      let release!: () => void;
      s.hold = new Promise((res) => (release = res));
      const inFlight = r.report();
      await new Promise((res) => setTimeout(res, 20));
      s.hold = undefined;
      const changed = change();
      release();
      await changed;
      await inFlight;
    };
    const last = () => [s.heartbeats.at(-1)?.snapshot?.status, s.heartbeats.at(-1)?.sandboxIds];
    // A drain that starts then hands sbx1 over: once drain() resolves, the scheduler has LINGERING without it.
    await whileOneIsInFlight(async () => {
      roster.splice(0, 1);
      await r.drain();
      expect(last()).toEqual([NodeStatus.LINGERING, ['sbx2', 'sbx3']]);
    });
    // A roster report likewise: once report() resolves, the scheduler has the roster without sbx2.
    await whileOneIsInFlight(async () => {
      roster.splice(0, 1);
      await r.report();
      expect(last()).toEqual([NodeStatus.LINGERING, ['sbx3']]);
    });
    // Reports that come while one waits for the heartbeat in flight share the one after it.
    expect(s.heartbeats.length).toBe(5);
  });

  it('closes without waiting when the scheduler is down, and logs that it could not unregister', async () => {
    const s = scheduler();
    s.up = false;
    const log = logCapture();
    const r = start(s, log);
    await until(() => s.failedBeats >= 1, 'a failed heartbeat');
    r.onLifecycle({ sandboxId: 'sbx1', event: 'paused', level: 'info', message: '' });
    await r.drain();
    await r.close();
    expect(log.count(/^could not unregister/)).toBe(1);
    expect(log.count(/^sandbox events not sent/)).toBe(1);
  });
});
