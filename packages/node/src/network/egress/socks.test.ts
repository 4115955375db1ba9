import { describe, expect, it } from 'vitest';
import { parseCidr, type Cidr } from '@aenv/config';
import { connectThroughSocks } from './socks.js';
import { UpstreamResolver } from './upstream.js';

const resolver = new UpstreamResolver({
  servers: ['127.0.0.1:9'],
  deniedCidrs: [parseCidr('10.0.0.0/8') as Cidr],
  timeoutMs: 200,
});
const proxy = (host: string) => ({ address: `${host}:1080`, host, port: 1080 });

describe('connectThroughSocks', () => {
  it('never dials a proxy in a denied range or on the host itself', async () => {
    for (const host of ['10.1.2.3', '127.0.0.1']) {
      const c = connectThroughSocks(
        proxy(host),
        { host: 'a.test', port: 443 },
        { resolver, timeoutMs: 2000 },
      );
      await expect(c.ready).rejects.toThrow(/is in a range sandboxes may not reach/);
      expect(c.socket.destroyed).toBe(true);
      expect(c.socket.remoteAddress).toBeUndefined();
    }
  });

  it('refuses a proxy name that does not resolve, without dialling', async () => {
    const c = connectThroughSocks(
      proxy('proxy.invalid'),
      { host: 'a.test', port: 443 },
      { resolver, timeoutMs: 5000 },
    );
    await expect(c.ready).rejects.toThrow(
      /^egress proxy proxy\.invalid:1080: proxy\.invalid does not resolve/,
    );
    expect(c.socket.destroyed).toBe(true);
  });
});
