import { describe, expect, it } from 'vitest';
import { hostRoute, needsApiKey, normalizeDomains, route } from './routing.js';

const D = normalizeDomains(['Sbx.Example.test', 'example.test.', 'sbx.example.test']);
const r = (method: string, url: string, headers: Record<string, string> = {}) =>
  route(method, url, { host: 'gw.local:8080', ...headers }, D);
const sdk = { 'e2b-sandbox-id': 'abc123', 'e2b-sandbox-port': '49983' };

describe('gateway routing (docs/cluster.md#how-the-gateway-routes)', () => {
  it('normalises host-route domains: lowercase, deduplicated, longest first', () => {
    expect(D).toEqual(['sbx.example.test', 'example.test']);
  });

  it('routes a host-routed request to the sandbox, before headers and control-plane paths', () => {
    expect(route('POST', '/sandboxes', { host: '3000-abc.sbx.example.test', ...sdk }, D)).toEqual({
      kind: 'data',
      sandboxId: 'abc',
      port: 3000,
      hostRouted: true,
    });
    expect(hostRoute('8080-x1.example.test:443', D)).toEqual({ sandboxId: 'x1', port: 8080 });
    expect(hostRoute('gw.other.test', D)).toBeUndefined();
  });

  it('refuses hostile host routes under a served domain with 400, without the API key', () => {
    for (const host of [
      '0-abc.example.test',
      '65536-abc.example.test',
      'abc.example.test',
      '80-.example.test',
      '80-ABC_x.example.test',
      `80-${'a'.repeat(70)}.example.test`,
      '80--abc.example.test',
    ]) {
      const got = route('GET', '/', { host }, D);
      expect(got, host).toMatchObject({ kind: 'reject', status: 400 });
      expect(needsApiKey(got)).toBe(false);
    }
  });

  it('routes /proxy* only with both routing headers', () => {
    expect(r('GET', '/proxy/x?y=1', sdk)).toEqual({
      kind: 'data',
      sandboxId: 'abc123',
      port: 49983,
      hostRouted: false,
    });
    expect(r('GET', '/proxy/x')).toMatchObject({ kind: 'reject', message: 'sandbox id header required' });
    expect(r('GET', '/proxy', { 'x-agentenv-sandbox-id': 'a' })).toMatchObject({
      kind: 'reject',
      message: 'target port header required',
    });
    for (const port of ['0', '65536', '80x', '-1'])
      expect(r('GET', '/proxy/', { 'e2b-sandbox-id': 'a', 'e2b-sandbox-port': port })).toMatchObject({
        kind: 'reject',
        status: 400,
      });
    expect(r('GET', '/proxy/', { 'e2b-sandbox-id': 'a/../b', 'e2b-sandbox-port': '1' })).toMatchObject({
      kind: 'reject',
      status: 400,
    });
  });

  it('treats a request with both headers as sandbox traffic unless its path is the control plane', () => {
    expect(r('GET', '/health', sdk)).toMatchObject({ kind: 'data' });
    expect(r('POST', '/process.Process/Start', sdk)).toMatchObject({ kind: 'data' });
    expect(r('GET', '/files?path=/a', sdk)).toMatchObject({ kind: 'data' });
    expect(r('GET', '/sandboxes/abc123', sdk)).toEqual({ kind: 'sandbox', sandboxId: 'abc123', op: '' });
    expect(r('GET', '/health', { 'e2b-sandbox-id': 'abc' })).toEqual({ kind: 'health' });
  });

  it('answers /health and /metrics itself, the cluster list, nodes', () => {
    expect(r('GET', '/health')).toEqual({ kind: 'health' });
    expect(r('GET', '/metrics')).toEqual({ kind: 'metrics' });
    expect(r('GET', '/sandboxes?limit=2')).toEqual({ kind: 'list' });
    expect(r('GET', '/v2/sandboxes')).toEqual({ kind: 'list' });
    expect(r('GET', '/nodes')).toEqual({ kind: 'nodes' });
    expect(r('GET', '/nodes/n%201')).toEqual({ kind: 'node', nodeId: 'n 1', op: '' });
    expect(r('GET', '/nodes/%ZZ')).toMatchObject({ kind: 'reject', status: 400, dataPlane: false });
  });

  it('sends the per-node routes (GET /nodes/{id}, POST /nodes/{id}/drain) to the named node, never a picked one', () => {
    expect(r('POST', '/nodes/node-a/drain')).toEqual({ kind: 'node', nodeId: 'node-a', op: 'drain' });
    expect(r('POST', '/nodes/node%2Da/drain?x=1')).toEqual({ kind: 'node', nodeId: 'node-a', op: 'drain' });
    expect(r('GET', '/nodes/node-a?clusterID=c')).toEqual({ kind: 'node', nodeId: 'node-a', op: '' });
    // Routing headers do not make a node call sandbox traffic.
    expect(r('POST', '/nodes/node-a/drain', sdk)).toEqual({ kind: 'node', nodeId: 'node-a', op: 'drain' });
    for (const bad of [
      '/nodes//drain',
      '/nodes/%20/drain',
      '/nodes/%2F/drain',
      '/nodes/a%2Fb/drain',
      '/nodes/..%2Fsandboxes/drain',
      '/nodes/a%5Cb/drain',
      '/nodes/a%00b/drain',
      '/nodes/a%0D%0Ab/drain',
      '/nodes/%ZZ/drain',
      '/nodes/%E0%A4%A/drain',
      `/nodes/${'a'.repeat(513)}/drain`,
      `/nodes/${'%C3%A9'.repeat(257)}/drain`,
    ]) {
      const got = r('POST', bad);
      expect(got, bad).toEqual({ kind: 'reject', status: 400, message: 'invalid node id', dataPlane: false });
      expect(needsApiKey(got), bad).toBe(true);
    }
    expect(r('GET', '/nodes/a%2Fb')).toMatchObject({ kind: 'reject', status: 400 });
    expect(r('POST', `/nodes/${'a'.repeat(512)}/drain`)).toMatchObject({ kind: 'node', op: 'drain' });
    // What the node does not serve goes on as any other call (the node answers 404).
    expect(r('GET', '/nodes/node-a/drain')).toEqual({ kind: 'any' });
    expect(r('POST', '/nodes/node-a')).toEqual({ kind: 'any' });
    expect(r('POST', '/nodes/node-a/undrain')).toEqual({ kind: 'any' });
  });

  it('finds the sandbox id of control-plane calls by method and path', () => {
    expect(r('DELETE', '/sandboxes/s1')).toEqual({ kind: 'sandbox', sandboxId: 's1', op: '' });
    for (const op of ['pause', 'resume', 'fork', 'connect', 'timeout', 'refreshes', 'snapshots'])
      expect(r('POST', `/sandboxes/s1/${op}`)).toEqual({ kind: 'sandbox', sandboxId: 's1', op });
    expect(r('POST', '/v2/sandboxes/s1/connect')).toEqual({
      kind: 'sandbox',
      sandboxId: 's1',
      op: 'connect',
    });
    expect(r('PUT', '/sandboxes/s1/network')).toEqual({ kind: 'sandbox', sandboxId: 's1', op: 'network' });
    expect(r('PATCH', '/sandboxes/s1/custom-extension-params')).toMatchObject({ kind: 'sandbox' });
    expect(r('GET', '/sandboxes/s1/logs')).toMatchObject({ kind: 'sandbox', op: 'logs' });
    // Not a sandbox: the metrics of many, a wrong method, an unknown op.
    expect(r('GET', '/sandboxes/metrics')).toEqual({ kind: 'sandbox-metrics' });
    expect(r('GET', '/sandboxes/s1/pause')).toEqual({ kind: 'any' });
    expect(r('POST', '/sandboxes/s1/bogus')).toEqual({ kind: 'any' });
    expect(r('GET', `/sandboxes/${'a'.repeat(200)}`)).toMatchObject({ kind: 'reject', status: 400 });
  });

  it('places creates (warm, v2 and cold) and sends the rest of the control plane anywhere', () => {
    expect(r('POST', '/sandboxes')).toEqual({ kind: 'create', cold: false });
    expect(r('POST', '/v2/sandboxes')).toEqual({ kind: 'create', cold: false });
    expect(r('POST', '/sandboxes-cold')).toEqual({ kind: 'create', cold: true });
    expect(r('GET', '/teams')).toEqual({ kind: 'any' });
  });

  it('sends template and snapshot calls to the template routes (docs/cluster.md#templates-and-snapshots-in-a-cluster)', () => {
    const id = '11111111-1111-4111-8111-111111111111';
    const t = (method: string, url: string) => {
      const x = r(method, url);
      return x.kind === 'template' ? x.op : x;
    };
    expect(t('GET', '/templates')).toEqual({ kind: 'list' });
    expect(t('GET', '/v2/templates')).toEqual({ kind: 'page', of: 'templates' });
    expect(t('GET', '/snapshots?limit=2')).toEqual({ kind: 'page', of: 'snapshots' });
    expect(t('POST', '/v3/templates')).toEqual({ kind: 'build' });
    expect(t('GET', '/templates/aliases/my%2Dt')).toEqual({ kind: 'alias', alias: 'my-t' });
    expect(t('POST', '/templates/tags')).toEqual({ kind: 'tags' });
    expect(t('DELETE', '/templates/tags')).toEqual({ kind: 'tags' });
    for (const [m, u] of [
      ['GET', `/templates/${id}`],
      ['DELETE', `/templates/${id}`],
      ['PATCH', `/v2/templates/${id}`],
      ['POST', `/v2/templates/${id}/builds/${id}`],
      ['GET', `/templates/${id}/builds/${id}/status`],
      ['GET', `/templates/${id}/files/${'a'.repeat(64)}`],
      ['GET', `/snapshots/${id}`],
    ] as const)
      expect(t(m, u), `${m} ${u}`).toEqual({ kind: 'one', ref: id });
    const upload = r('PUT', `/templates/${id}/files/${'a'.repeat(64)}/upload?token=x`);
    expect(upload).toEqual({ kind: 'template', op: { kind: 'upload', ref: id } });
    expect(needsApiKey(upload)).toBe(false);
    // Not an upload link (an id that is not a UUID, a short hash): a call that needs the key.
    expect(needsApiKey(r('PUT', `/templates/base/files/${'a'.repeat(64)}/upload`))).toBe(true);
    expect(needsApiKey(r('PUT', `/templates/${id}/files/abc/upload`))).toBe(true);
    expect(t('GET', '/templates/%E0%A4%A')).toEqual({
      kind: 'reject',
      status: 400,
      message: 'invalid path',
      dataPlane: false,
    });
  });

  it('routes /secrets reads and writes, refuses bad ids before any node, and always asks for the API key', () => {
    const id = `sec_${'0a'.repeat(12)}`;
    expect(r('GET', '/secrets?limit=5')).toEqual({ kind: 'secrets', write: false });
    expect(r('POST', '/secrets')).toEqual({ kind: 'secrets', write: true });
    expect(r('GET', `/secrets/${id}`)).toEqual({ kind: 'secrets', write: false });
    expect(r('GET', '/secrets/Upstream-Key_1')).toEqual({ kind: 'secrets', write: false });
    expect(r('POST', `/secrets/${id}`)).toEqual({ kind: 'secrets', write: true });
    expect(r('DELETE', '/secrets/name')).toEqual({ kind: 'secrets', write: true });
    // Routing headers do not make a /secrets call sandbox traffic.
    expect(r('POST', '/secrets', sdk)).toEqual({ kind: 'secrets', write: true });
    for (const bad of [
      '/secrets/..%2Fsandboxes',
      '/secrets/%2e%2e',
      '/secrets/a%20b',
      '/secrets/%ZZ',
      `/secrets/${'a'.repeat(129)}`,
      '/secrets/-lead',
      `/secrets/SEC_${'0a'.repeat(12)}x`,
    ]) {
      const got = r('DELETE', bad);
      expect(got, bad).toMatchObject({ kind: 'reject', status: 400, dataPlane: false });
      expect(needsApiKey(got), bad).toBe(true);
    }
    expect(r('DELETE', '/secrets/%2e%2e')).toMatchObject({ message: 'invalid secret id or name ".."' });
    for (const got of [r('GET', '/secrets'), r('POST', '/secrets'), r('DELETE', `/secrets/${id}`)])
      expect(needsApiKey(got)).toBe(true);
    // Methods the node does not serve there go on as any other call (the node answers 404).
    expect(r('PUT', '/secrets/x')).toEqual({ kind: 'any' });
    expect(r('GET', '/secrets/x/y')).toEqual({ kind: 'any' });
  });

  it('asks for the API key everywhere but sandbox traffic, /health and /metrics', () => {
    expect(needsApiKey(r('GET', '/health'))).toBe(false);
    expect(needsApiKey(r('GET', '/metrics'))).toBe(false);
    expect(needsApiKey(r('GET', '/files', sdk))).toBe(false);
    expect(needsApiKey(r('GET', '/proxy/x'))).toBe(false);
    for (const [m, u] of [
      ['GET', '/sandboxes'],
      ['POST', '/sandboxes'],
      ['GET', '/nodes'],
      ['GET', '/nodes/node-a'],
      ['POST', '/nodes/node-a/drain'],
      ['GET', '/templates'],
      ['DELETE', '/sandboxes/x'],
    ] as const)
      expect(needsApiKey(r(m, u)), `${m} ${u}`).toBe(true);
  });
});
