// A real scheduler with static nodes and a real gateway in front of it, both in this process on loopback: what
// the gateway's tests stand on (the nodes are the tests' own HTTP servers).
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { defaultClusterConfig, startScheduler, type RunningScheduler } from '@aenv/scheduler';
import { startGateway, type RunningGateway } from '../run.js';

export const silentLog = pino({ level: 'silent' }, new Writable({ write: (_c, _e, cb) => cb() }));

type GatewaySection = ReturnType<typeof defaultClusterConfig>['gateway'];
type SchedulerSection = ReturnType<typeof defaultClusterConfig>['scheduler'];

export interface SchedulerAndGateway {
  sched: RunningScheduler;
  gw: RunningGateway;
  /** The gateway's URL. */
  base: string;
  stop(): Promise<void>;
}

export async function startSchedulerAndGateway(
  nodes: { id: string; url: string }[],
  apiKey: string,
  gateway: Partial<GatewaySection> = {},
  scheduler: Partial<SchedulerSection> = {},
): Promise<SchedulerAndGateway> {
  const sc = defaultClusterConfig();
  Object.assign(sc.scheduler, scheduler);
  sc.scheduler.grpcListenAddr = '127.0.0.1:0';
  sc.scheduler.metricsListenAddr = '127.0.0.1:0';
  sc.scheduler.nodes = nodes.map((n) => ({ id: n.id, endpoint: n.url }));
  const sched = await startScheduler(sc, { queryOnly: false, log: silentLog });
  const gc = defaultClusterConfig();
  Object.assign(gc.gateway, {
    httpListenAddr: '127.0.0.1:0',
    metricsListenAddr: '127.0.0.1:0',
    schedulerAddr: `127.0.0.1:${sched.grpcPort}`,
    ...gateway,
  });
  let gw: RunningGateway;
  try {
    gw = await startGateway(gc, apiKey, silentLog);
  } catch (e) {
    await sched.stop();
    throw e;
  }
  return {
    sched,
    gw,
    base: `http://127.0.0.1:${gw.port}`,
    stop: async () => {
      await gw.stop();
      await sched.stop();
    },
  };
}
