import { describe, expect, it } from 'vitest';
import { parseNetworkPolicy } from '../policy.js';
import { applyOverrides, compileRules, maskedRules, overridesFor, secretReferences } from './header-rules.js';

const rules = (r: unknown) => parseNetworkPolicy({ rules: r }).rules;
const h = (headers: Record<string, string>) => [{ transform: { headers } }];

describe('network.rules matching', () => {
  const matcher = compileRules(
    rules({
      'API.Example.com': h({ Authorization: 'exact' }),
      '*.example.com': h({ Authorization: 'wild' }),
      '*.deep.example.com': h({ 'X-Key': 'deeper' }),
      '*.com': h({ 'X-Broad': '1' }),
    }),
  );

  it('prefers the exact key, then the longest wildcard suffix, never merging sets', () => {
    expect(overridesFor(matcher, 'api.example.com')).toEqual([['Authorization', 'exact']]);
    expect(overridesFor(matcher, 'b.example.com')).toEqual([['Authorization', 'wild']]);
    // The longer wildcard wins alone: its set has no Authorization.
    expect(overridesFor(matcher, 'x.deep.example.com')).toEqual([['X-Key', 'deeper']]);
    expect(overridesFor(matcher, 'other.com')).toEqual([['X-Broad', '1']]);
  });

  it('wildcards match subdomains at any depth but not the apex; unknown names are not intercepted', () => {
    expect(overridesFor(matcher, 'a.b.c.example.com')).toEqual([['Authorization', 'wild']]);
    expect(overridesFor(matcher, 'example.com')).toEqual([['X-Broad', '1']]);
    expect(overridesFor(compileRules(rules({ '*.example.com': h({ A: '1' }) })), 'example.com')).toBeNull();
    expect(overridesFor(matcher, 'example.org')).toBeNull();
    expect(overridesFor(matcher, 'notexample.com')).toEqual([['X-Broad', '1']]);
    expect(
      overridesFor(compileRules(rules({ '*.example.com': h({ A: '1' }) })), 'badexample.com'),
    ).toBeNull();
    expect(compileRules(undefined)).toBeNull();
    expect(compileRules({})).toBeNull();
  });

  it("applies a key's rules in order, a later header replacing an earlier one case-insensitively", () => {
    const m = compileRules(
      rules({
        'a.test': [
          { transform: { headers: { authorization: 'first', 'X-A': 'a' } } },
          {},
          { transform: { headers: { Authorization: 'second' } } },
        ],
      }),
    );
    expect(overridesFor(m, 'a.test')).toEqual([
      ['Authorization', 'second'],
      ['X-A', 'a'],
    ]);
  });

  it('overrides replace every copy of a header the request carried, others are kept in order', () => {
    expect(
      applyOverrides(
        ['Host', 'a.test', 'authorization', 'mine', 'Accept', '*/*', 'AUTHORIZATION', 'again'],
        [['Authorization', 'Bearer edge']],
      ),
    ).toEqual(['Host', 'a.test', 'Accept', '*/*', 'Authorization', 'Bearer edge']);
  });

  it('masks every header value for API answers, keeping keys and names', () => {
    const r = rules({ 'a.test': h({ Authorization: 'Bearer s3cret' }), 'b.test': [{}] })!;
    expect(maskedRules(r)).toEqual({ 'a.test': h({ Authorization: '***' }), 'b.test': [{}] });
    expect(JSON.stringify(maskedRules(r))).not.toContain('s3cret');
  });
});

describe('network.rules validation', () => {
  const bad: [unknown, RegExp][] = [
    ['x', /rules must be an object/],
    [[], /rules must be an object/],
    [{ '*': h({ A: '1' }) }, /rules\["\*"\]: the key must be a domain name/],
    [{ 'a..b': h({ A: '1' }) }, /rules\["a\.\.b"\]/],
    [{ 'a.*.b': h({ A: '1' }) }, /rules\["a\.\*\.b"\]/],
    [{ '10.0.0.1/32': h({ A: '1' }) }, /rules\["10\.0\.0\.1\/32"\]/],
    [
      { 'A.test': h({ A: '1' }), 'a.test': h({ B: '1' }) },
      /rules\["a\.test"\]: domain a\.test is given twice/,
    ],
    [{ 'a.test': {} }, /rules\["a\.test"\] must be a list/],
    [{ 'a.test': ['x'] }, /rules\["a\.test"\]\[0\] must be an object/],
    [{ 'a.test': [{ match: 1 }] }, /rules\["a\.test"\]\[0\]\.match is not a rule field/],
    [{ 'a.test': [{ transform: { body: 'x' } }] }, /transform\.body is not a transform field/],
    [{ 'a.test': [{ transform: { headers: ['x'] } }] }, /transform\.headers must be an object/],
    [{ 'a.test': h({ A: 5 as unknown as string }) }, /headers\["A"\] must be a string/],
    [{ 'a.test': h({ 'Bad Name': 'v' }) }, /headers\["Bad Name"\]: the header name is not an HTTP token/],
    [{ 'a.test': h({ 'X:y': 'v' }) }, /not an HTTP token/],
    [{ 'a.test': h({ '': 'v' }) }, /not an HTTP token/],
    [{ 'a.test': h({ A: 'v\r\nX-Injected: 1' }) }, /headers\["A"\]: the value holds a control character/],
    [{ 'a.test': h({ A: 'nul\0' }) }, /control character/],
    [{ 'a.test': h({ A: 'snowman ☃' }) }, /outside Latin-1/],
    [{ 'a.test': h({ A: 'x'.repeat(8193) }) }, /longer than 8192 bytes/],
    [{ 'a.test': h({ a: '1', A: '2' }) }, /header A is given twice/],
    [{ 'a.test': Array.from({ length: 17 }, () => ({})) }, /has 17 rules; at most 16/],
    [{ 'a.test': h(Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`h${i}`, 'v']))) }, /33 headers/],
    [
      Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`h${i}.test`, []])),
      /101 domains; at most 100/,
    ],
  ];
  it.each(bad)('refuses %j naming the entry', (input, message) => {
    expect(() => rules(input)).toThrow(message);
  });

  it.each([
    'Host',
    'connection',
    'Content-Length',
    'Transfer-Encoding',
    'keep-alive',
    'TE',
    'Upgrade',
    'Trailer',
  ])('refuses the framing header %s', (name) => {
    expect(() => rules({ 'a.test': h({ [name]: 'v' }) })).toThrow(/cannot be set/);
  });

  // `${e2b.…}` placeholders (placeholders.ts): only `${e2b.secrets.<name>}` is filled; anything else that opens
  // like one would reach the upstream as literal text, so it is refused.
  const S = '${e2b.secrets.';
  const placeholderCases: [string, RegExp][] = [
    ['Bearer ${e2b.identity.tokens.aws}', /workload identity tokens\) is not supported by this server/],
    ['${e2b.identity.tokens.}', /workload identity tokens/],
    ['${e2b.env.HOME}', /unknown \$\{e2b\.…\} placeholder/],
    ['${E2B.SECRETS.key}', /unknown \$\{e2b\.…\} placeholder/],
    ['${ e2b.secrets.key}', /unknown \$\{e2b\.…\} placeholder/],
    ['${e2b.}', /unknown/],
    [`${S}key`, /never closed/],
    [`a ${S}ok} then ${S}`, /never closed/],
    [`${S}}`, /needs the name of a secret/],
    [`${S}my.key}`, /needs the name of a secret/],
    [`${S}a b}`, /needs the name of a secret/],
    [`${S}-lead}`, /needs the name of a secret/],
    [`${S}${'k'.repeat(129)}}`, /needs the name of a secret/],
    // Nested: the inner opening is part of the outer one's name, which is no name.
    [`${S}${S}inner}}`, /needs the name of a secret/],
    // Huge: thousands of placeholders in one value are scanned once, and the first bad one is named.
    [`${`${S}ok}`.repeat(400)}${S}bad!}`, /needs the name of a secret/],
  ];
  const labelled = placeholderCases.map(
    ([value, message]) =>
      [value.length > 60 ? `${value.slice(0, 40)}… (${value.length} chars)` : value, value, message] as const,
  );
  it.each(labelled)(
    'refuses the placeholder in %s, naming the header, never echoing it',
    (_label, value, message) => {
      let err: Error | undefined;
      try {
        rules({ 'a.test': h({ Authorization: value }) });
      } catch (e) {
        err = e as Error;
      }
      expect(err?.message).toMatch(/^rules\["a\.test"\]\[0\]\.transform\.headers\["Authorization"\]: /);
      expect(err?.message).toMatch(message);
      expect(err?.message).not.toContain(value);
    },
  );

  it('takes secret placeholders whose names the /secrets API takes, in either case, and literal dollar signs', () => {
    for (const value of [
      `Bearer ${S}openai-key}`,
      `${S}OpenAI_Key}`,
      `${S}${'k'.repeat(128)}}`,
      `${S}a}:${S}b}`,
      'price: $5, ${HOME}, ${e2b',
      `${'$'.repeat(20)}{e2b`,
    ])
      expect(rules({ 'a.test': h({ Authorization: value }) })).toEqual({
        'a.test': h({ Authorization: value }),
      });
  });

  it('lists the secrets the rules name, lowercased, with the entry naming each', () => {
    expect(
      secretReferences(
        rules({
          'a.test': [
            {},
            { transform: { headers: { Authorization: `Bearer ${S}Key-One}`, 'X-Other': 'plain' } } },
          ],
          '*.b.test': h({ 'X-Two': `${S}key-two}${S}key-one}` }),
        }),
      ),
    ).toEqual([
      { secret: 'key-one', where: 'rules["a.test"][1].transform.headers["Authorization"]' },
      { secret: 'key-two', where: 'rules["*.b.test"][0].transform.headers["X-Two"]' },
      { secret: 'key-one', where: 'rules["*.b.test"][0].transform.headers["X-Two"]' },
    ]);
    expect(secretReferences(undefined)).toEqual([]);
  });

  it('never echoes a header value in an error', () => {
    try {
      rules({ 'a.test': h({ A: 's3cret\n' }) });
      expect.unreachable();
    } catch (e) {
      expect((e as Error).message).not.toContain('s3cret');
    }
  });

  it('keeps valid rules normalized (lowercased keys, trailing dot dropped) and leaves no rules out of the policy', () => {
    expect(rules({ 'API.Example.COM.': h({ Authorization: 'Bearer x' }), '*.B.test': [] })).toEqual({
      'api.example.com': h({ Authorization: 'Bearer x' }),
      '*.b.test': [],
    });
    expect(parseNetworkPolicy({ rules: {} })).toEqual({
      allowOut: [],
      denyOut: [],
      allowInternetAccess: null,
    });
    expect(parseNetworkPolicy({ rules: null }).rules).toBeUndefined();
    expect(rules({ 'a.test': [{ transform: {} }, { transform: { headers: { A: '' } } }] })).toEqual({
      'a.test': [{ transform: {} }, { transform: { headers: { A: '' } } }],
    });
  });
});
