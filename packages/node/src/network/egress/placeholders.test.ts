import { describe, expect, it } from 'vitest';
import { fillPlaceholders, parsePlaceholders } from './placeholders.js';

const S = '${e2b.secrets.';
const store = new Map([
  ['api-key', 'sk-1'],
  ['other', 'o-2'],
  // A value that reads like a placeholder is a value, never filled again.
  ['tricky', `${S}api-key}`],
]);
const valueOf = (n: string) => store.get(n);

describe('secret placeholders', () => {
  it('finds each placeholder with the name lowercased as /secrets stores it', () => {
    expect(parsePlaceholders(`Bearer ${S}API-Key} and ${S}other}`)).toEqual([
      { start: 7, end: 29, secret: 'api-key' },
      { start: 34, end: 54, secret: 'other' },
    ]);
    expect(parsePlaceholders('no placeholder, ${HOME}')).toEqual([]);
  });

  it('fills every placeholder in one pass, in either case, leaving the rest of the value as it was', () => {
    expect(fillPlaceholders(`Bearer ${S}Api-Key}`, valueOf)).toEqual({ filled: 'Bearer sk-1' });
    expect(fillPlaceholders(`${S}api-key}:${S}other}!`, valueOf)).toEqual({ filled: 'sk-1:o-2!' });
    expect(fillPlaceholders(`x ${S}tricky} y`, valueOf)).toEqual({ filled: `x ${S}api-key} y` });
    expect(fillPlaceholders('plain', valueOf)).toEqual({ filled: 'plain' });
  });

  it('names an unknown secret, and refuses what it does not fill instead of passing it on', () => {
    expect(fillPlaceholders(`${S}api-key} ${S}Gone}`, valueOf)).toEqual({
      problem: 'names secret gone, which does not exist or cannot be read',
      secret: 'gone',
    });
    for (const value of ['${e2b.identity.tokens.aws}', `${S}a.b}`, `${S}open`, '${e2b.x}'])
      expect(fillPlaceholders(value, valueOf)).toEqual({ problem: expect.any(String) });
  });
});
