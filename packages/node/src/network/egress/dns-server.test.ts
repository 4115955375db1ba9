import * as dnsPacket from 'dns-packet';
import { describe, expect, it } from 'vitest';
import { answerQuery } from './dns-server.js';

const log = { debug() {}, info() {}, warn() {}, error() {} };
const upstream = {
  lookup: (name: string) =>
    Promise.resolve(name === 'api.a.test' ? [{ address: '198.51.100.30', ttl: 3600 }] : []),
};
const slot = { index: 3, patterns: ['api.a.test', '*.b.test'], anyName: false };
const query = (name: string, type: 'A' | 'AAAA' | 'TXT' = 'A') =>
  dnsPacket.encode({ type: 'query', id: 7, flags: dnsPacket.RECURSION_DESIRED, questions: [{ type, name }] });
/** The decoded answer; dns-packet decodes the rcode too, which its types leave out. */
const ask = async (q: Buffer, s = slot) => {
  const out = await answerQuery(q, s, upstream, log);
  return out === null ? null : (dnsPacket.decode(out) as dnsPacket.DecodedPacket & { rcode: string });
};

describe('answerQuery', () => {
  it('answers an allowed name from the upstream resolver, with a capped TTL', async () => {
    const r = await ask(query('API.a.test'));
    expect(r?.id).toBe(7);
    expect(r?.rcode).toBe('NOERROR');
    expect(r?.answers).toEqual([expect.objectContaining({ type: 'A', data: '198.51.100.30', ttl: 300 })]);
  });

  it('refuses names outside allowOut, so DNS carries nothing out of a closed sandbox', async () => {
    expect((await ask(query('evil.test')))?.rcode).toBe('REFUSED');
    expect((await ask(query('b.test')))?.rcode).toBe('REFUSED');
    expect((await ask(query('x.y.b.test')))?.rcode).toBe('NXDOMAIN');
    expect((await ask(query('exfil-data-here.evil.test', 'TXT')))?.rcode).toBe('REFUSED');
  });

  it('answers any name when the slot may use DNS anyway, and other types with an empty answer', async () => {
    expect((await ask(query('api.a.test', 'AAAA')))?.answers).toEqual([]);
    expect((await ask(query('elsewhere.test'), { ...slot, anyName: true }))?.rcode).toBe('NXDOMAIN');
  });

  it('ignores garbage and responses', async () => {
    expect(await answerQuery(Buffer.from('nonsense'), slot, upstream, log)).toBeNull();
    const response = dnsPacket.encode({
      type: 'response',
      id: 1,
      questions: [{ type: 'A', name: 'a.test' }],
    });
    expect(await answerQuery(response, slot, upstream, log)).toBeNull();
  });
});
