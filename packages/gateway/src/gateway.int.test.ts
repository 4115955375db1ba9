// The gateway with Redis bindings and a query-only scheduler (docs/cluster.md#the-gateway): lookups go to the
// query-only scheduler, so calls about existing sandboxes keep working while the main scheduler is down.
// Needs the test Redis (test/services); no root, but run with the integration tests.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSchedulerClient } from '@aenv/protocol';
import { defaultClusterConfig, startScheduler, type RunningScheduler } from '@aenv/scheduler';
import { startGateway, type RunningGateway } from './run.js';

const DB = 11;
const REDIS = `${(process.env.AENV_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379').replace(/\/\d*$/, '')}/${DB}`;
const KEY = 'e2b_' + 'q'.repeat(40);
const silent = pino({ level: 'silent' }, new Writable({ write: (_c, _e, cb) => cb() }));

describe('aenv gateway with a query-only scheduler', () => {
  const admin = new Redis(REDIS);
  let node: Server;
  let main: RunningScheduler | undefined;
  let query: RunningScheduler;
  let gw: RunningGateway;
  let nodeUrl: string;

  const scheduler = (queryOnly: boolean) => {
    const c = defaultClusterConfig();
    c.scheduler.grpcListenAddr = '127.0.0.1:0';
    c.scheduler.metricsListenAddr = '127.0.0.1:0';
    c.scheduler.redisAddr = REDIS;
    c.scheduler.nodes = [{ id: 'qnode', endpoint: nodeUrl }];
    return startScheduler(c, { queryOnly, log: silent });
  };

  beforeAll(async () => {
    await admin.flushdb();
    node = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ url: req.url }));
    });
    await new Promise<void>((r) => node.listen(0, '127.0.0.1', r));
    nodeUrl = `http://127.0.0.1:${(node.address() as AddressInfo).port}`;
    main = await scheduler(false);
    query = await scheduler(true);
    const c = defaultClusterConfig();
    Object.assign(c.gateway, {
      httpListenAddr: '127.0.0.1:0',
      metricsListenAddr: '127.0.0.1:0',
      schedulerAddr: `127.0.0.1:${main.grpcPort}`,
      queryOnlySchedulerAddr: `127.0.0.1:${query.grpcPort}`,
    });
    gw = await startGateway(c, KEY, silent);
  });
  afterAll(async () => {
    await gw?.stop();
    await main?.stop();
    await query?.stop();
    node?.close();
    await admin.flushdb();
    admin.disconnect();
  });

  it('records through the main scheduler, looks up through the query-only one', async () => {
    const rpc = createSchedulerClient(`127.0.0.1:${main!.grpcPort}`);
    await rpc.recordAssignment({ sandboxId: 'sbx-q', node: { nodeId: 'qnode', endpoint: nodeUrl } });
    await main!.stop();
    main = undefined;
    const r = await fetch(`http://127.0.0.1:${gw.port}/sandboxes/sbx-q`, { headers: { 'x-api-key': KEY } });
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ url: '/sandboxes/sbx-q' });
    // A create needs Schedule, which only the main scheduler serves.
    const create = await fetch(`http://127.0.0.1:${gw.port}/sandboxes`, {
      method: 'POST',
      headers: { 'x-api-key': KEY },
      body: '{}',
    });
    expect(create.status).toBe(503);
  });
});
