// The floor of the gateway's overhead (docs/benchmarks.md#gateway): the least a relay in front of one node can
// do, in a Node process of its own as the gateway is. Every request goes to the node as it came (hop-by-hop fields
// dropped) through one undici Agent, the answer streamed back; a create (POST /sandboxes, /v2/sandboxes) also pays
// what any gateway must: a Schedule round trip before it and a RecordAssignment after it, stored before the answer
// leaves, with the scheduler client the gateway uses. No auth, no routing table, no metrics, no checks.
// Started by gateway-bench.mjs with fork(): argv node origin, scheduler address; sends {port} when listening.
import { createServer } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { Agent } from 'undici';
import { createSchedulerClient } from '@aenv/protocol';

const [nodeOrigin, schedulerAddr] = process.argv.slice(2);
const agent = new Agent({ headersTimeout: 0, bodyTimeout: 0 });
const scheduler = createSchedulerClient(schedulerAddr);
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'upgrade', 'host']);

/** @param {Record<string, string | string[] | undefined>} headers */
function endToEnd(headers) {
  /** @type {Record<string, string | string[]>} */
  const out = {};
  for (const k in headers) if (!HOP.has(k) && headers[k] !== undefined) out[k] = headers[k];
  return out;
}

async function readAll(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return Buffer.concat(chunks);
}

/**
 * @param {import('node:http').IncomingMessage} req
 * @param {import('node:http').ServerResponse} res
 */
async function create(req, res) {
  const body = await readAll(req);
  const node = (await scheduler.schedule({})).node;
  if (!node) throw new Error('no node scheduled');
  const up = await agent.request({
    origin: node.endpoint,
    path: req.url ?? '/',
    method: /** @type {import('undici').Dispatcher.HttpMethod} */ (req.method),
    headers: endToEnd(req.headers),
    body,
  });
  const answer = await up.body.arrayBuffer();
  if (up.statusCode === 201 || up.statusCode === 200) {
    const id = JSON.parse(Buffer.from(answer).toString()).sandboxID;
    await scheduler.recordAssignment({ sandboxId: id, node });
  }
  res.writeHead(up.statusCode, endToEnd(up.headers)).end(Buffer.from(answer));
}

/**
 * @param {import('node:http').IncomingMessage} req
 * @param {import('node:http').ServerResponse} res
 */
async function relay(req, res) {
  const hasBody =
    req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined;
  const up = await agent.request({
    origin: nodeOrigin,
    path: req.url ?? '/',
    method: /** @type {import('undici').Dispatcher.HttpMethod} */ (req.method),
    headers: endToEnd(req.headers),
    body: hasBody ? req : null,
  });
  const headers = endToEnd(up.headers);
  res.writeHead(up.statusCode, headers);
  if (headers['content-length'] === undefined) res.flushHeaders();
  await pipeline(up.body, res);
}

const server = createServer((req, res) => {
  const isCreate = req.method === 'POST' && (req.url === '/sandboxes' || req.url === '/v2/sandboxes');
  (isCreate ? create(req, res) : relay(req, res)).catch((e) => {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' }).end(String(e));
    else res.destroy();
  });
});
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () =>
  process.send?.({ port: /** @type {import('node:net').AddressInfo} */ (server.address()).port }),
);
process.on('disconnect', () => process.exit(0));
