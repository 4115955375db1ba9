import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createdSandboxIds } from './assignments.js';
import { parseGatewayArgs } from './cli.js';
import { loadGatewayConfig, resolveGatewayApiKey } from './config.js';
import { placementHint } from './placement.js';

const KEY = 'e2b_' + 'a'.repeat(40);

describe('what a create or fork made (assignment recording)', () => {
  const body = (v: unknown) => Buffer.from(JSON.stringify(v));
  it('takes the answer header first, then the body keys wherever the reference looks', () => {
    expect(createdSandboxIds({ 'x-agentenv-sandbox-id': 'h1' }, body({ sandboxID: 'b1' }))).toEqual(['h1']);
    expect(createdSandboxIds({}, body({ sandboxID: 'b1' }))).toEqual(['b1']);
    expect(createdSandboxIds({}, body({ sandboxId: 'b2' }))).toEqual(['b2']);
    expect(createdSandboxIds({}, body({ data: { sandbox_id: 'b3' } }))).toEqual(['b3']);
    expect(createdSandboxIds({}, body({ sandboxes: [{ sandboxID: 'c1' }, { sandboxID: 'c2' }] }))).toEqual([
      'c1',
      'c2',
    ]);
    // aenv's fork answer: one entry per child, failed children carry an error instead.
    expect(
      createdSandboxIds(
        {},
        body([{ sandbox: { sandboxID: 'f1' } }, { error: { code: 500 } }, { sandbox: { sandboxID: 'f2' } }]),
      ),
    ).toEqual(['f1', 'f2']);
    expect(createdSandboxIds({}, Buffer.from('not json'))).toEqual([]);
    expect(createdSandboxIds({}, body({ sandboxID: 7 }))).toEqual([]);
  });
});

describe('the placement hint of a create body', () => {
  it('carries metadata (strings only), and for cold creates cpu, memory and the image', () => {
    const warm = placementHint(Buffer.from('{"metadata":{"a":"1","b":2}}'), false);
    expect(warm.kind).toMatchObject({ case: 'newSandbox', value: { metadata: { a: '1' } } });
    const cold = placementHint(Buffer.from('{"image":"busybox","cpuCount":2,"memoryMB":512}'), true);
    expect(cold.kind).toMatchObject({
      case: 'newColdSandbox',
      value: { cpuCount: 2, memoryMb: 512n, images: ['busybox'] },
    });
    // Nonsense gives an empty hint; the node answers the client's 400.
    const bad = placementHint(Buffer.from('{"cpuCount":-1,"memoryMB":"x"'), true);
    expect(bad.kind).toMatchObject({ case: 'newColdSandbox', value: { cpuCount: 0, memoryMb: 0n } });
  });
});

describe('aenv gateway flags, config and key', () => {
  it('takes -config in Go or GNU style and refuses anything else', () => {
    expect(parseGatewayArgs(['-config', 'a.json']).configPath).toBe('a.json');
    expect(parseGatewayArgs(['--config=b.json']).configPath).toBe('b.json');
    expect(() => parseGatewayArgs(['-config'])).toThrow('needs a path');
    expect(() => parseGatewayArgs(['--query-only'])).toThrow('unknown argument');
  });

  it('reads the gateway section, the environment over it, and refuses numeric durations', () => {
    const dir = mkdtempSync(join(tmpdir(), 'aenv-gw-'));
    const file = join(dir, 'c.json');
    writeFileSync(file, JSON.stringify({ gateway: { request_timeout: '2s', debug_mode: true } }));
    const c = loadGatewayConfig(file, { GATEWAY_HTTP_LISTEN_ADDR: '127.0.0.1:9999' });
    expect(c.gateway).toMatchObject({
      requestTimeoutMs: 2000,
      debugMode: true,
      httpListenAddr: '127.0.0.1:9999',
    });
    writeFileSync(file, JSON.stringify({ gateway: { request_timeout: 30 } }));
    expect(() => loadGatewayConfig(file, {})).toThrow('gateway.request_timeout must be a duration string');
    writeFileSync(file, JSON.stringify({ gateway: { bogus: 1 } }));
    expect(() => loadGatewayConfig(file, {})).toThrow('bogus');
  });

  it('takes the key from AENV_API_KEY, else the mounted file; never makes one', () => {
    const dir = mkdtempSync(join(tmpdir(), 'aenv-gw-'));
    expect(resolveGatewayApiKey({ AENV_API_KEY: KEY }, join(dir, 'none'))).toBe(KEY);
    expect(() => resolveGatewayApiKey({ AENV_API_KEY: 'short' }, join(dir, 'none'))).toThrow(
      'invalid API key',
    );
    expect(() => resolveGatewayApiKey({}, join(dir, 'none'))).toThrow('no API key');
    writeFileSync(join(dir, 'api-key'), `${KEY}\n`);
    expect(resolveGatewayApiKey({}, join(dir, 'api-key'))).toBe(KEY);
    writeFileSync(join(dir, 'api-key'), `${KEY} x\n`);
    expect(() => resolveGatewayApiKey({}, join(dir, 'api-key'))).toThrow('invalid API key');
    expect(() => resolveGatewayApiKey({}, dir)).toThrow('regular file');
  });
});
