import { describe, expect, it } from 'vitest';
import { InitBodyError, validateInitBody } from './init.js';

describe('/init body', () => {
  it('keeps the fields it knows and drops the rest', () => {
    expect(
      validateInitBody({
        envVars: { A: '1' },
        accessToken: 'tok',
        defaultUser: 'user',
        defaultWorkdir: '/w',
        timestamp: '2026-01-01T00:00:00Z',
        sandboxId: 's',
        templateId: 't',
        initKey: 'k',
        signatureMaxLifetimeSecs: 60,
        unexpiringSignaturesUntil: 0,
        volumeMounts: [],
        hyperloopIP: '1.2.3.4',
      }),
    ).toEqual({
      envVars: { A: '1' },
      accessToken: 'tok',
      defaultUser: 'user',
      defaultWorkdir: '/w',
      timestamp: '2026-01-01T00:00:00Z',
      sandboxId: 's',
      templateId: 't',
      initKey: 'k',
      signatureMaxLifetimeSecs: 60,
      unexpiringSignaturesUntil: 0,
    });
  });

  it('rejects malformed /init bodies', () => {
    expect(() => validateInitBody([])).toThrow(InitBodyError);
    expect(() => validateInitBody({ envVars: { A: 1 } })).toThrow(InitBodyError);
    expect(() => validateInitBody({ envVars: { 'A=B': 'x' } })).toThrow(InitBodyError);
    expect(() => validateInitBody({ accessToken: 5 })).toThrow(InitBodyError);
    expect(validateInitBody({ envVars: null, accessToken: null })).toEqual({ envVars: {} });
  });

  it('names the field that is wrong', () => {
    const message = (raw: unknown) => {
      try {
        validateInitBody(raw);
      } catch (e) {
        expect(e).toBeInstanceOf(InitBodyError);
        return (e as Error).message;
      }
      throw new Error('accepted');
    };
    expect(message('x')).toBe('body must be a JSON object');
    expect(message({ envVars: [] })).toBe('envVars must be an object');
    expect(message({ envVars: { '': 'x' } })).toBe("invalid env var ''");
    expect(message({ envVars: { A: 'x\0y' } })).toBe("invalid env var 'A'");
    expect(message({ defaultUser: 5 })).toBe('defaultUser must be a string');
    for (const bad of [-1, 1.5, '60', Number.MAX_SAFE_INTEGER + 1])
      expect(message({ signatureMaxLifetimeSecs: bad })).toBe(
        'signatureMaxLifetimeSecs must be a non-negative integer',
      );
  });
});
