import { describe, expect, it } from 'vitest';
import { fileSignature } from '@aenv/protocol';
import {
  Budget,
  parseSignedFiles,
  SignedUrlBudgetExceeded,
  SignedUrlRouter,
  type SigningCandidate,
} from './signed-urls.js';

const NOW = 1_800_000_000_000;
const DAY = 86400;

function url(path: string, token: string, op: 'read' | 'write', exp?: number): string {
  const sig = fileSignature(path, op, '', token, exp === undefined ? undefined : String(exp));
  const q = new URLSearchParams({
    path,
    signature: sig,
    ...(exp !== undefined ? { signature_expiration: String(exp) } : {}),
  });
  return `/files?${q}`;
}

describe('signed /files URLs', () => {
  const candidates: SigningCandidate[] = Array.from({ length: 50 }, (_, i) => ({
    id: `sbx-${i}`,
    createdAtMs: NOW - 3600_000,
    token: `${i}`.padStart(64, '0'),
  }));
  const byId = (id: string) => candidates.find((c) => c.id === id);

  it('reads only well-formed signatures of GET and POST /files, as envd parses the URL', () => {
    const good = url('/a', 'tok', 'read');
    expect(parseSignedFiles(good, 'GET')).toMatchObject({ path: '/a', op: 'read', username: '' });
    expect(parseSignedFiles(good, 'POST')).toMatchObject({ op: 'write' });
    expect(parseSignedFiles(good, 'DELETE')).toBeUndefined();
    expect(parseSignedFiles('/files?path=/a&signature=v1_short', 'GET')).toBeUndefined();
    expect(
      parseSignedFiles(`/files?path=/a&signature=v1_${'A'.repeat(43)}&signature_expiration=1e9`, 'GET'),
    ).toBeUndefined();
    expect(parseSignedFiles(good.replace('/files', '/other'), 'GET')).toBeUndefined();
    expect(parseSignedFiles(good.replace('/files', '/x/../files'), 'GET')).toMatchObject({ path: '/a' });
  });

  it('routes a header-less URL once by trying the candidates, then by what it remembered', () => {
    const router = new SignedUrlRouter({ maxLifetimeSecs: DAY, hashesPerSec: 1000, now: () => NOW });
    const s = parseSignedFiles(url('/a', candidates[37]!.token, 'read'), 'GET')!;
    let listed = 0;
    const list = () => {
      listed++;
      return candidates;
    };
    expect(router.find(s, byId, list)).toBe('sbx-37');
    expect(router.find(s, byId, list)).toBe('sbx-37');
    expect(router.find(s, byId, list)).toBe('sbx-37');
    expect(listed).toBe(1);
    // A signature no candidate made finds nothing (and is not remembered: it is tried again).
    const forged = { ...s, signature: `v1_${'B'.repeat(43)}` };
    expect(router.find(forged, byId, list)).toBeUndefined();
    expect(router.find(forged, byId, list)).toBeUndefined();
    expect(listed).toBe(3);
    // A remembered signature whose sandbox is gone is tried afresh.
    expect(
      router.find(
        s,
        () => undefined,
        () => [],
      ),
    ).toBeUndefined();
  });

  it('spends a hash budget on first sights and refuses past it', () => {
    let now = NOW;
    const router = new SignedUrlRouter({ maxLifetimeSecs: DAY, hashesPerSec: 120, now: () => now });
    const forged = (i: number) => parseSignedFiles(url(`/${i}`, 'x', 'read'), 'GET')!;
    const known = parseSignedFiles(url('/k', candidates[0]!.token, 'read'), 'GET')!;
    // 50 candidates a first sight: 120 a second buys two.
    expect(router.find(known, byId, () => candidates)).toBe('sbx-0');
    expect(router.find(forged(1), byId, () => candidates)).toBeUndefined();
    expect(() => router.find(forged(2), byId, () => candidates)).toThrow(SignedUrlBudgetExceeded);
    // A remembered URL costs one hash, outside the budget.
    expect(router.find(known, byId, () => candidates)).toBe('sbx-0');
    now += 1000;
    expect(router.find(forged(3), byId, () => candidates)).toBeUndefined();
    expect(router.find(forged(4), byId, () => candidates)).toBeUndefined();
    expect(() => router.find(forged(5), byId, () => candidates)).toThrow(SignedUrlBudgetExceeded);
  });

  it('caps lifetimes: far expirations are refused, unexpiring URLs only while the sandbox is young', () => {
    let now = NOW;
    const router = new SignedUrlRouter({ maxLifetimeSecs: DAY, hashesPerSec: 1e6, now: () => now });
    const c = candidates[5]!;
    const sec = Math.floor(NOW / 1000);
    const ok = parseSignedFiles(url('/a', c.token, 'read', sec + 600), 'GET')!;
    const far = parseSignedFiles(url('/a', c.token, 'read', sec + 2 * DAY), 'GET')!;
    const past = parseSignedFiles(url('/a', c.token, 'read', sec - 1), 'GET')!;
    const never = parseSignedFiles(url('/a', c.token, 'read'), 'GET')!;
    expect(router.verify(ok, c)).toBe(true);
    expect(router.verify(far, c)).toBe(false);
    expect(router.verify(past, c)).toBe(false);
    expect(router.verify(never, c)).toBe(true);
    expect(router.find(far, byId, () => candidates)).toBeUndefined();
    now = c.createdAtMs + (DAY + 1) * 1000;
    expect(router.verify(never, c)).toBe(false);
    expect(router.find(never, byId, () => candidates)).toBeUndefined();
    // The operation and path are part of what is signed.
    expect(router.verify({ ...ok, op: 'write' }, c)).toBe(false);
  });

  it('keeps a budget per second', () => {
    let t = 0;
    const b = new Budget(10, () => t);
    expect(b.take(10)).toBe(true);
    expect(b.take(1)).toBe(false);
    t = 500;
    expect(b.take(5)).toBe(true);
    expect(b.take(1)).toBe(false);
    t = 10_000;
    expect(b.take(11)).toBe(false);
    expect(b.take(10)).toBe(true);
  });
});
