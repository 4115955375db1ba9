import { describe, expect, it } from 'vitest';
import { parseColdRequest } from './cold-request.js';
import { ApiError } from './errors.js';

const DEFAULTS = { cpuCount: 2, memoryMB: 1024 };

/** The 400 message a body gets, or undefined when it is accepted. */
function refusal(body: unknown): string | undefined {
  try {
    parseColdRequest(body, DEFAULTS);
    return undefined;
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    expect((e as ApiError).status).toBe(400);
    return (e as ApiError).message;
  }
}

describe('POST /sandboxes-cold body', () => {
  it('fills cpu and memory a request leaves out from [machine]; the disk is left to the image', () => {
    expect(parseColdRequest({ image: 'aenv/busybox' }, DEFAULTS).resources).toEqual(DEFAULTS);
    const r = parseColdRequest(
      { image: 'aenv/base', cpuCount: 1, memoryMB: 128, diskSizeMB: 2048, allowInternetAccess: false },
      DEFAULTS,
    );
    expect(r.resources).toEqual({ cpuCount: 1, memoryMB: 128, diskSizeMB: 2048 });
    expect(r.body.allowInternetAccess).toBe(false);
  });

  it.each([
    [{ image: 'i', cpuCount: 0 }, 'cpuCount must be greater than 0'],
    [{ image: 'i', cpuCount: -3 }, 'cpuCount must be greater than 0'],
    [{ image: 'i', memoryMB: 127 }, 'memoryMB must be at least 128'],
    [{ image: 'i', memoryMB: 0 }, 'memoryMB must be at least 128'],
    [{ image: 'i', diskSizeMB: 512 }, 'diskSizeMB must be at least 1024 and divisible by 1024'],
    [{ image: 'i', diskSizeMB: 1536 }, 'diskSizeMB must be at least 1024 and divisible by 1024'],
    [{ image: 'i', diskSizeMB: 0 }, 'diskSizeMB must be at least 1024 and divisible by 1024'],
  ])('%j → %s', (body, message) => {
    expect(refusal(body)).toBe(message);
  });

  it.each([
    [undefined, /a JSON body is required/],
    [{}, /image: .*expected string/i],
    [{ image: '' }, /image: image must not be empty/],
    [{ image: 'x'.repeat(5000) }, /image: /],
    [{ image: 42 }, /image: /],
    [{ image: 'i', cpuCount: '2' }, /cpuCount: /],
    [{ image: 'i', cpuCount: 1.5 }, /cpuCount: /],
    [{ image: 'i', memoryMB: 1e300 }, /memoryMB: /],
    [{ image: 'i', diskSizeMB: true }, /diskSizeMB: /],
    [{ image: 'i', timeout: -1 }, /timeout: /],
    [{ image: 'i', metadata: { a: 1 } }, /metadata\.a: /],
    [{ image: 'i', envVars: [] }, /envVars: /],
    [{ image: 'i', allowInternetAccess: 'yes' }, /allowInternetAccess: /],
    [{ image: 'i', extraBootArgs: 7 }, /extraBootArgs: /],
    [{ image: 'i', attachedDrives: {} }, /attachedDrives: /],
  ])('%j is a 400 naming the field', (body, message) => {
    expect(refusal(body)).toMatch(message);
  });

  it('refuses what aenv cannot honour, naming the field, and accepts its empty values', () => {
    expect(refusal({ image: 'i', extraBootArgs: 'quiet' })).toMatch(/^extraBootArgs is not supported/);
    expect(refusal({ image: 'i', mcp: { x: 1 } })).toMatch(/^mcp is not supported/);
    expect(refusal({ image: 'i', attachedDrives: [], extraBootArgs: '' })).toBeUndefined();
  });

  it('takes attachedDrives, with the reference defaults (docs/volumes.md)', () => {
    const r = parseColdRequest(
      { image: 'i', attachedDrives: [{ driveID: ' data ', source: { image: 'aenv/busybox' } }] },
      DEFAULTS,
    );
    expect(r.drives).toEqual([
      { driveID: 'data', readOnly: true, mountPath: '/mnt/data', image: 'aenv/busybox' },
    ]);
  });

  it('takes volumeMounts when the node has volumes, else refuses them naming the field', () => {
    const body = { image: 'i', volumeMounts: [{ name: 'v', path: '/data' }] };
    expect(refusal(body)).toMatch(
      /^volumeMounts is not supported by this server \(this node has no volumes\)/,
    );
    expect(() => parseColdRequest(body, DEFAULTS, { volumes: true })).not.toThrow();
  });
});
