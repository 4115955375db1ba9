import { describe, expect, it } from 'vitest';
import { ApiError } from './errors.js';
import {
  refuseUnsupportedCreateFields,
  refuseUnsupportedNetworkUpdateFields,
  refuseUnsupportedSnapshotFields,
} from './unsupported-fields.js';

const refusal = (fn: () => void): { status: number; message: string } | undefined => {
  try {
    fn();
    return undefined;
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return { status: e.status, message: e.message };
  }
};

describe('sandbox request fields aenv does not implement', () => {
  it.each([
    ['mcp', { mcp: { 'github-official': { githubPersonalAccessToken: 'x' } } }],
    ['iam', { iam: { tokens: { aws: { audience: 'sts.amazonaws.com', tokenType: 'JWT-SVID' } } } }],
    ['iam', { iam: 'yes' }],
    ['volumeMounts', { volumeMounts: [{ name: 'vol', path: '/data' }] }],
  ])('refuses %s with a 400 that names it', (field, extra) => {
    const r = refusal(() => refuseUnsupportedCreateFields({ templateID: 'base', ...extra }));
    expect(r?.status).toBe(400);
    expect(r?.message.startsWith(`${field} is not supported by this server (`)).toBe(true);
  });

  it('accepts a field that is left out or asks for nothing', () => {
    for (const body of [
      { templateID: 'base' },
      { templateID: 'base', mcp: null, iam: {}, volumeMounts: [] },
      { templateID: 'base', iam: { tokens: {} } },
      {
        templateID: 'base',
        network: { rules: {}, egressProxy: null, maskRequestHost: '', httpsPorts: [], allowOut: ['1.1.1.1'] },
      },
      // Fields no SDK sends are ignored, as E2B's API ignores them.
      { templateID: 'base', somethingNew: { enabled: true } },
    ]) {
      expect(refusal(() => refuseUnsupportedCreateFields(body))).toBeUndefined();
    }
  });

  it('takes egress rules and proxies on a network update (the policy parser checks them), not ingress settings', () => {
    // network.rules are served (docs/networking.md#credentials-at-the-edge): policy.ts validates them.
    expect(refusal(() => refuseUnsupportedNetworkUpdateFields({ rules: { '*.example.com': [{}] } }))).toBe(
      undefined,
    );
    expect(
      refusal(() => refuseUnsupportedNetworkUpdateFields({ egressProxy: { address: 'p.example.com:1' } })),
    ).toBeUndefined();
    expect(refusal(() => refuseUnsupportedNetworkUpdateFields({ allowOut: ['1.1.1.1'], rules: {} }))).toBe(
      undefined,
    );
    // Ingress settings are the create's.
    for (const body of [{ httpsPorts: [8443] }, { maskRequestHost: '${PORT}-h.example.com' }])
      expect(refusal(() => refuseUnsupportedNetworkUpdateFields(body))).toEqual({
        status: 400,
        message: expect.stringMatching(/^(httpsPorts|maskRequestHost) cannot be changed by a network update/),
      });
  });

  it('refuses a filesystem-only snapshot, and takes the full one the SDKs ask for by default', () => {
    expect(refusal(() => refuseUnsupportedSnapshotFields({ memory: false }))).toMatchObject({
      status: 400,
      message: expect.stringMatching(/^memory is not supported by this server \(filesystem-only snapshots/),
    });
    for (const body of [{}, { name: 'snap' }, { memory: true }, undefined, null])
      expect(refusal(() => refuseUnsupportedSnapshotFields(body))).toBeUndefined();
  });
});
