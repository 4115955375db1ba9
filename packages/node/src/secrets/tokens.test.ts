import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';
import { envdAccessToken, safeEqual, SandboxTokenIssuer, trafficAccessToken, verifyToken } from './tokens.js';

const SEED = 'test-seed';
const ID = '01936f8e-72f5-7000-8000-000000000001';
const ENVD = '4f00f2a93a87c37161ae01c59b6d4f84506668113441277e9f6272dd4bfae1a7';
const TRAFFIC = '586547d7c10facb0f4871297fdbfd9d2b4376f4b02b2e1487646c1c87a293bd8';

describe('sandbox access tokens (docs/security.md)', () => {
  it('matches the reference test vector', () => {
    expect(envdAccessToken(SEED, ID)).toBe(ENVD);
    expect(trafficAccessToken(SEED, ID)).toBe(TRAFFIC);
  });

  it('verifies only the right token of the right kind, sandbox and seed', () => {
    expect(verifyToken(SEED, 'envd', ID, ENVD)).toBe(true);
    expect(verifyToken(SEED, 'traffic', ID, TRAFFIC)).toBe(true);
    expect(verifyToken(SEED, 'envd', ID, ENVD.toUpperCase())).toBe(true);
    expect(verifyToken(SEED, 'traffic', ID, ENVD)).toBe(false);
    expect(verifyToken(SEED, 'envd', ID, TRAFFIC)).toBe(false);
    expect(verifyToken('other-seed', 'envd', ID, ENVD)).toBe(false);
    expect(verifyToken(SEED, 'envd', '01936f8e-72f5-7000-8000-000000000002', ENVD)).toBe(false);
  });

  it('rejects malformed candidates', () => {
    for (const bad of [
      '',
      'not-a-token',
      '0'.repeat(64),
      ENVD.slice(0, 63),
      `${ENVD}0`,
      `${ENVD.slice(0, 63)}g`,
    ]) {
      expect(verifyToken(SEED, 'envd', ID, bad), bad).toBe(false);
    }
  });

  it('the issuer derives the same tokens and never prints its seed', () => {
    const issuer = new SandboxTokenIssuer('super-secret-seed');
    expect(issuer.envd(ID)).toBe(envdAccessToken('super-secret-seed', ID));
    expect(issuer.traffic(ID)).toBe(trafficAccessToken('super-secret-seed', ID));
    expect(issuer.verify('envd', ID, issuer.envd(ID))).toBe(true);
    expect(inspect(issuer)).not.toContain('super-secret');
    expect(JSON.stringify({ issuer })).not.toContain('super-secret');
    expect(() => new SandboxTokenIssuer('  ')).toThrow(/must not be empty/);
  });
});

describe('safeEqual', () => {
  it('compares strings exactly', () => {
    expect(safeEqual('abc', 'abc')).toBe(true);
    expect(safeEqual('abc', 'abd')).toBe(false);
    expect(safeEqual('abc', 'abcd')).toBe(false);
    expect(safeEqual('', '')).toBe(true);
    expect(safeEqual('é', 'é')).toBe(true);
  });
});
