// Property-based fuzzing of every route family of a real node (docs/security.md, "Hostile API callers"): the
// control plane, upload links, and the data-plane proxy by headers, by `/proxy` prefix and by host, fed
// malformed percent-encoding, unicode, empty and over-long ids, bad JSON, wrong types, odd content types, huge
// and duplicated headers. Every answer must be a client error in the documented shape (or a harmless success of
// a lookup), the node must keep answering /health, and nothing it stores may change.
//
// Bounded: AENV_FUZZ_RUNS cases per family (default 300), AENV_FUZZ_SECONDS per family at most (default 40);
// AENV_FUZZ_SEED replays a failure. scripts/fuzz-api.mjs runs this file for longer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { startServer, logsForFailure, type TestServer, ENVD_PORT } from '../e2e/harness.js';
import { expectErrorShape, expectHealthy, rawExchange, storedState, type RawAnswer } from './lib.js';

const RUNS = Number(process.env.AENV_FUZZ_RUNS ?? 300);
const SECONDS = Number(process.env.AENV_FUZZ_SECONDS ?? 40);
const SEED = process.env.AENV_FUZZ_SEED === undefined ? undefined : Number(process.env.AENV_FUZZ_SEED);
const DOMAIN = 'sbx.test';

const options = () => ({
  numRuns: RUNS,
  ...(SEED !== undefined ? { seed: SEED } : {}),
  plugins: [fc.interruptAfterTimeLimit(SECONDS * 1000)],
});

// ---- building blocks ----

const MALFORMED_PCT = [
  '%',
  '%%',
  '%zz',
  '%E0%A4%A',
  '%C0%AF',
  '%FF%FE',
  '%00',
  '%2e%2e',
  '%2F',
  '%u0041',
  '%5',
  '%%32%65',
];

const unicode = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 });
/** Raw bytes a client may put in a path segment (no '/', '?', '#', space or control characters). */
const segmentSafe = (s: string) =>
  [...s]
    .map((c) => (/[/?#\s]/.test(c) || c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f ? '_' : c))
    .join('');

/** A path segment that names nothing this node stores (a real id or name would make a mutation valid). */
function idSegment(real: Set<string>): fc.Arbitrary<string> {
  return fc
    .oneof(
      fc.constant(''),
      fc.constantFrom(...MALFORMED_PCT),
      fc.integer({ min: 100, max: 3000 }).map((n) => 'x'.repeat(n)),
      fc.uuid(),
      fc.uuid().map((u) => u.toUpperCase()),
      unicode.map((s) => encodeURIComponent(s)),
      unicode.map(segmentSafe),
      fc
        .tuple(fc.string({ maxLength: 6 }), fc.constantFrom(...MALFORMED_PCT), fc.string({ maxLength: 6 }))
        .map(([a, p, b]) => encodeURIComponent(a) + p + encodeURIComponent(b)),
      fc.constantFrom('.', '..', '%2e', '..%2F..%2Fetc%2Fpasswd', 'null', 'undefined', '[object Object]'),
    )
    .filter((s) => {
      let decoded = s;
      try {
        decoded = decodeURIComponent(s);
      } catch {
        // stays raw
      }
      return !real.has(decoded.toLowerCase()) && !real.has(s.toLowerCase());
    });
}

/** A query string built from parameters of the list routes with values the routes must refuse or ignore. */
const query = fc
  .array(
    fc.tuple(
      fc.constantFrom(
        'limit',
        'nextToken',
        'state',
        'metadata',
        'order',
        'startedAfter',
        'template',
        'clusterID',
        'sandboxID',
        'name',
        'level',
        'logsOffset',
        'teamID',
        '%zz',
        '',
      ),
      fc.oneof(
        fc.constantFrom(
          '-1',
          '0',
          '101',
          '1e9',
          'NaN',
          'running,nope',
          'sideways',
          'not-a-date',
          '%zz',
          '%',
          'a=b%26c',
          '==',
        ),
        unicode.map(encodeURIComponent),
        fc.integer({ min: 200, max: 4000 }).map((n) => 'q'.repeat(n)),
      ),
    ),
    { maxLength: 5 },
  )
  .map((pairs) => pairs.map(([k, v]) => `${k}=${v}`).join('&'));

const jsonText = fc.oneof(
  fc.constantFrom(
    '{',
    '{"a":',
    '[',
    'nul',
    '{"templateID": }',
    '\u0000',
    '{"a":1}}',
    '"unterminated',
    '{"__proto__": {"polluted": true}}',
    '{"constructor": {"prototype": {"polluted": true}}}',
    '{"templateID": "nx-\\ud800"}',
    '[1,2,3]',
    '1e999999',
    '{"timeout": 1e999}',
  ),
  unicode,
);

/** A body with the routes' fields in wrong types (or values no route accepts): never a valid request. */
const wrongTypes = fc.record(
  {
    templateID: fc.oneof(
      fc.integer(),
      fc.constant(null),
      fc.array(fc.string()),
      fc.string({ maxLength: 20 }).map((s) => `nx-${s.replace(/[/:]/g, '_')}`),
    ),
    timeout: fc.oneof(fc.string(), fc.double(), fc.integer({ min: -1e12, max: -1 }), fc.constant(2 ** 40)),
    metadata: fc.oneof(
      fc.string(),
      fc.array(fc.integer()),
      fc.dictionary(fc.string(), fc.integer(), { maxKeys: 3 }),
    ),
    envVars: fc.oneof(
      fc.string(),
      fc.constant(null),
      fc.dictionary(fc.string(), fc.boolean(), { maxKeys: 3 }),
    ),
    secure: fc.oneof(fc.string(), fc.integer()),
    network: fc.oneof(fc.string(), fc.record({ allowOut: fc.oneof(fc.string(), fc.array(fc.integer())) })),
    name: fc.oneof(
      fc.integer(),
      fc.constant(null),
      unicode.map((s) => `${s}:tag`),
      unicode.map((s) => `ü${s}`),
    ),
    cpuCount: fc.oneof(fc.string(), fc.double({ noInteger: true }), fc.integer({ min: -100, max: 0 })),
    memoryMB: fc.oneof(fc.string(), fc.integer({ min: -100, max: 127 })),
    count: fc.oneof(fc.string(), fc.integer({ min: -5, max: 0 }), fc.integer({ min: 101, max: 1e6 })),
    steps: fc.oneof(
      fc.string(),
      fc.array(fc.record({ type: fc.integer(), args: fc.string() }), { maxLength: 3 }),
    ),
    fromImage: fc.oneof(fc.integer(), fc.array(fc.string())),
    duration: fc.oneof(fc.string(), fc.integer({ min: 3601, max: 1e9 })),
  },
  { requiredKeys: [] },
);

const contentType = fc.constantFrom(
  'application/json',
  'application/json; charset=utf-16',
  'text/plain',
  'text/xml',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  '',
  'application/json, application/json',
);

/** Extra headers: duplicated, huge, unicode, or odd values of headers the server reads. */
const extraHeaders = fc.array(
  fc.oneof(
    fc.constantFrom(
      'X-Api-Key: wrong',
      'Accept: */*',
      'Content-Encoding: gzip',
      'X-Request-Id: %zz',
      'Accept-Version: %zz',
      'Host: ::::',
      'Cookie: a=b',
    ),
    unicode.map((s) => `X-Unicode: ${s}`),
    fc
      .integer({ min: 1, max: 40 })
      .map((n) => Array.from({ length: n }, (_, i) => `X-Dup: ${i}`).join('\r\n')),
    fc.integer({ min: 1000, max: 24_000 }).map((n) => `X-Huge: ${'h'.repeat(n)}`),
  ),
  { maxLength: 3 },
);

interface Sent {
  method: string;
  path: string;
  headers: string[];
  body: string;
}

function bytesOf(r: Sent): Buffer {
  const head = [`${r.method} ${r.path} HTTP/1.1`, ...r.headers, 'Connection: close'];
  if (!r.headers.some((h) => /^host:/i.test(h))) head.splice(1, 0, 'Host: 127.0.0.1');
  if (r.body) head.push(`Content-Length: ${Buffer.byteLength(r.body)}`);
  return Buffer.from(head.join('\r\n') + '\r\n\r\n' + r.body, 'utf8');
}

/** Sends one fuzz case; any failure names the exact request so it can be replayed by hand. */
async function send(server: TestServer, r: Sent): Promise<RawAnswer> {
  try {
    return await rawExchange(server.port, bytesOf(r));
  } catch (e) {
    throw new Error(`${(e as Error).message}\nrequest: ${JSON.stringify(r).slice(0, 2000)}`);
  }
}

/**
 * E2B's "sandbox not found" answer of the data plane (docs/differences.md#data-plane-proxy): JSON with its
 * `sandboxId`.
 */
function expectSandboxNotFound(a: RawAnswer): void {
  expect(a.headers['content-type'], a.raw).toMatch(/^application\/json/);
  expect(JSON.parse(a.body), a.raw).toMatchObject({ code: 502, message: expect.any(String) });
}

/**
 * A data-plane refusal: JSON `{code, message}`, or the plain-text routing errors
 * (docs/networking.md#data-plane-routing).
 */
function expectDataPlaneError(a: RawAnswer): void {
  if (/^text\/plain/.test(a.headers['content-type'] ?? '')) expect(a.body.length, a.raw).toBeGreaterThan(0);
  else if (a.headers['content-type']) expectErrorShape(a);
}

describe('fuzzing every route family of a real node', () => {
  let server: TestServer;
  let sandboxId: string;
  let before: unknown;
  const real = new Set<string>();
  // A name of this run only: a node's home outlives a test run.
  const keep = `sreq5-keep-${Date.now().toString(36)}`;

  beforeAll(async () => {
    server = await startServer({ name: 'sreq5', toml: `[sandbox_proxy]\ndomains = ["${DOMAIN}"]` });
    const sbx = await server.api('POST', '/v2/sandboxes', {
      templateID: 'base',
      timeout: 900,
      secure: true,
      network: { allowPublicTraffic: false },
      metadata: { fuzz: 'keep' },
    });
    // A hook's failure is not a test's: the node's logs go into the message (CI shows nothing else).
    expect(sbx.status, `${JSON.stringify(sbx.body)}\n${logsForFailure()}`).toBe(201);
    sandboxId = sbx.body.sandboxID;
    const tpl = await server.api('POST', '/v3/templates', { name: keep });
    expect(tpl.status).toBe(202);
    for (const name of ['base', keep, sandboxId, tpl.body.templateID]) real.add(String(name).toLowerCase());
    for (const t of (await server.api('GET', '/templates')).body as { templateID: string }[])
      real.add(t.templateID.toLowerCase());
    before = await storedState(server);
  });
  afterAll(async () => {
    if (!server) return;
    await server.api('DELETE', `/templates/${keep}`);
    expect(await server.shutdown()).toBe(0);
  });

  it('control plane: ids, queries, bodies, content types and headers', async () => {
    const routes: [string, string][] = [
      ['GET', '/sandboxes/{a}'],
      ['DELETE', '/sandboxes/{a}'],
      ['POST', '/sandboxes/{a}/timeout'],
      ['POST', '/sandboxes/{a}/refreshes'],
      ['POST', '/sandboxes/{a}/connect'],
      ['POST', '/v2/sandboxes/{a}/connect'],
      ['POST', '/sandboxes/{a}/resume'],
      ['POST', '/sandboxes/{a}/pause'],
      ['POST', '/sandboxes/{a}/fork'],
      ['PUT', '/sandboxes/{a}/network'],
      ['POST', '/sandboxes/{a}/snapshots'],
      ['GET', '/snapshots/{a}'],
      ['GET', '/templates/{a}'],
      ['DELETE', '/templates/{a}'],
      ['GET', '/templates/aliases/{a}'],
      ['GET', '/templates/{a}/files/{b}'],
      ['GET', '/templates/{a}/builds/{b}/status'],
      ['POST', '/v2/templates/{a}/builds/{b}'],
      ['GET', '/nodes/{a}'],
      ['POST', '/nodes/{a}/drain'],
      ['POST', '/sandboxes'],
      ['POST', '/v2/sandboxes'],
      ['POST', '/v3/templates'],
      ['GET', '/v2/sandboxes?{q}'],
      ['GET', '/sandboxes?{q}'],
      ['GET', '/snapshots?{q}'],
      ['GET', '/v2/templates?{q}'],
      ['GET', '/templates?{q}'],
      ['GET', '/nodes?{q}'],
      ['PATCH', '/sandboxes/{a}'],
      ['POST', '/events/webhooks'],
      ['GET', '/events/webhooks/{a}'],
      ['PATCH', '/events/webhooks/{a}'],
      ['DELETE', '/events/webhooks/{a}'],
      ['GET', '/events/webhooks/{a}/deliveries?{q}'],
      ['GET', '/events/webhooks/{a}/stats?{q}'],
      ['GET', '/events/sandboxes/{a}?{q}'],
      ['GET', '/{a}'],
    ];
    const id = idSegment(real);
    const body = fc.oneof(
      fc.constant(''),
      jsonText,
      wrongTypes.map((b) => JSON.stringify(b)),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...routes),
        id,
        id,
        query,
        body,
        contentType,
        extraHeaders,
        fc.boolean(),
        async ([method, template], a, b, q, text, type, extra, withKey) => {
          const path = template.replace('{a}', a).replace('{b}', b).replace('{q}', q);
          const headers = [
            ...(withKey ? [`X-API-Key: ${server.apiKey}`] : []),
            ...(type ? [`Content-Type: ${type}`] : []),
            ...extra,
          ];
          const answer = await send(server, { method, path, headers, body: method === 'GET' ? '' : text });
          expect(answer.status, answer.raw.slice(0, 500)).toBeLessThan(500);
          if (answer.status === 401) expect(answer.body).toBe('');
          else if (answer.status >= 400) expectErrorShape(answer);
          await expectHealthy(server);
        },
      ),
      options(),
    );
    expect(await storedState(server)).toEqual(before);
  });

  it('upload links: template ids, hashes, tokens, methods and bodies', async () => {
    const hash = fc.oneof(
      fc.stringMatching(/^[0-9a-f]{64}$/),
      fc.stringMatching(/^[0-9A-F]{64}$/),
      fc.constantFrom(...MALFORMED_PCT),
      fc.string({ maxLength: 70 }).map((s) => encodeURIComponent(s) || 'x'),
    );
    const token = fc.oneof(
      fc.constant(''),
      fc.stringMatching(/^\d{1,12}\.[0-9a-f]{64}$/),
      fc.constantFrom(...MALFORMED_PCT),
      unicode.map(encodeURIComponent),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('PUT', 'GET', 'POST', 'DELETE', 'PATCH', 'HEAD'),
        idSegment(real),
        hash,
        token,
        fc.oneof(fc.constant(''), fc.string({ maxLength: 200 })),
        extraHeaders,
        async (method, tid, h, tok, text, extra) => {
          const path = `/templates/${tid || 'x'}/files/${h}/upload${tok ? `?token=${tok}` : ''}`;
          const answer = await send(server, {
            method,
            path,
            headers: extra,
            body: method === 'HEAD' ? '' : text,
          });
          expect(answer.status, answer.raw.slice(0, 500)).toBeGreaterThanOrEqual(400);
          expect(answer.status, answer.raw.slice(0, 500)).toBeLessThan(500);
          if (method !== 'HEAD' && answer.headers['content-length'] !== '0') expectErrorShape(answer);
          await expectHealthy(server);
        },
      ),
      options(),
    );
    expect(await storedState(server)).toEqual(before);
  });

  it('data plane: routing headers, /proxy paths and tokens', async () => {
    const sandbox = fc.oneof(
      fc.constant(sandboxId),
      fc.constant(sandboxId.toUpperCase()),
      fc.constant(` ${sandboxId} `),
      idSegment(new Set()).map((s) => s.slice(0, 200)),
    );
    const port = fc.constantFrom(
      String(ENVD_PORT),
      '8000',
      '0',
      '65536',
      '-1',
      'abc',
      '',
      '٤٩٩٨٣',
      ` ${ENVD_PORT} `,
      `${ENVD_PORT}, 8000`,
      '1e3',
    );
    const token = fc.oneof(
      fc.constant(''),
      fc.string({ maxLength: 80 }),
      fc.stringMatching(/^[0-9a-f]{64}$/),
    );
    const path = fc.oneof(
      fc.constantFrom(
        '/',
        '/health',
        '/files?path=/etc/passwd',
        '/files?signature=x&path=a',
        '/envs',
        '/process.Process/List',
        '//x',
        '/proxy',
        '/proxy//health',
      ),
      idSegment(new Set()).map((s) => `/${s}`),
      idSegment(new Set()).map((s) => `/proxy/${s}`),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'OPTIONS'),
        path,
        sandbox,
        port,
        fc.boolean(),
        token,
        token,
        fc.oneof(fc.constant(''), jsonText),
        extraHeaders,
        async (method, p, id, prt, twice, access, traffic, text, extra) => {
          const headers = [
            `E2B-Sandbox-Id: ${id}`,
            ...(twice ? [`X-Agentenv-Sandbox-Id: ${id}`, `E2B-Sandbox-Id: ${sandboxId}`] : []),
            `E2B-Sandbox-Port: ${prt}`,
            ...(access ? [`X-Access-Token: ${access}`] : []),
            ...(traffic ? [`E2B-Traffic-Access-Token: ${traffic}`] : []),
            ...(text ? ['Content-Type: application/json'] : []),
            ...extra,
          ];
          const answer = await send(server, { method, path: p, headers, body: method === 'GET' ? '' : text });
          // 502 is E2B's "sandbox not found" (JSON); nothing else on the server's side may fail.
          if (answer.status === 502) expectSandboxNotFound(answer);
          else expect(answer.status, answer.raw.slice(0, 500)).toBeLessThan(500);
          if (answer.status >= 400 && answer.status !== 502) expectDataPlaneError(answer);
          await expectHealthy(server);
        },
      ),
      options(),
    );
    expect(await storedState(server)).toEqual(before);
  });

  it('data plane: host-based routing', async () => {
    const label = fc.oneof(
      fc.constant(`${ENVD_PORT}-${sandboxId}`),
      fc.constant(`8000-${sandboxId.toUpperCase()}`),
      fc
        .tuple(fc.constantFrom('0', '65536', 'x', '', '-1', '٤٩٩٨٣', '49983'), idSegment(new Set()))
        .map(([p, i]) => `${p}-${segmentSafe(i).slice(0, 100)}`),
      unicode.map(segmentSafe),
    );
    const host = fc.oneof(
      label.map((l) => `${l}.${DOMAIN}`),
      label.map((l) => `${l}.${DOMAIN}.:8080`),
      label.map((l) => `a.${l}.${DOMAIN}`),
      fc.constantFrom(DOMAIN, `.${DOMAIN}`, `[::1]`, `-.${DOMAIN}`, `${DOMAIN}:99999`, ''),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('GET', 'POST', 'DELETE'),
        fc.constantFrom(
          '/',
          '/health',
          '/sandboxes',
          '/v2/sandboxes',
          '/files?path=x',
          '/proxy/health',
          '/%zz',
        ),
        host,
        extraHeaders,
        async (method, p, h, extra) => {
          const answer = await send(server, { method, path: p, headers: [`Host: ${h}`, ...extra], body: '' });
          if (answer.status === 502) expectSandboxNotFound(answer);
          else expect(answer.status, answer.raw.slice(0, 500)).toBeLessThan(500);
          if (answer.status >= 400 && answer.status !== 502 && answer.status !== 401)
            expectDataPlaneError(answer);
          await expectHealthy(server);
        },
      ),
      options(),
    );
    expect(await storedState(server)).toEqual(before);
  });
});
