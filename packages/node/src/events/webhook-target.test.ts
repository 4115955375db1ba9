import { describe, expect, it } from 'vitest';
import { refusedAddress, refusedUrl, type TargetPolicy } from './webhook-target.js';

const policy: TargetPolicy = {
  allowLoopback: false,
  apiPort: 3000,
  internalCidrs: ['10.11.0.0/16', '10.12.0.0/16'],
};
const loopbackOk = { ...policy, allowLoopback: true };

describe('webhook targets', () => {
  it('accepts public and private http(s) URLs', () => {
    for (const u of [
      'https://hooks.example.com/e2b',
      'http://192.0.2.10:8080/x?token=a',
      'http://10.0.0.5/hook',
      'https://[2001:db8::1]/hook',
    ])
      expect(refusedUrl(u, policy), u).toBeUndefined();
  });

  it('refuses what is not an http(s) URL, credentials and over-long URLs', () => {
    expect(refusedUrl('ftp://example.com/', policy)).toMatch(/http/);
    expect(refusedUrl('file:///etc/passwd', policy)).toMatch(/http/);
    expect(refusedUrl('javascript:alert(1)', policy)).toMatch(/http/);
    expect(refusedUrl('/relative', policy)).toMatch(/absolute/);
    expect(refusedUrl('http://user:pw@example.com/', policy)).toMatch(/credentials/);
    expect(refusedUrl(`https://example.com/${'a'.repeat(2048)}`, policy)).toMatch(/2048/);
  });

  it('refuses link-local (metadata), unspecified, multicast and the internal sandbox networks', () => {
    expect(refusedUrl('http://169.254.169.254/latest/meta-data', policy)).toMatch(/link-local/);
    expect(refusedUrl('http://0.0.0.0:80/', policy)).toMatch(/unspecified/);
    expect(refusedUrl('http://[::]/', policy)).toMatch(/unspecified/);
    expect(refusedUrl('http://[fe80::1]/', policy)).toMatch(/link-local/);
    expect(refusedUrl('http://224.0.0.1/', policy)).toMatch(/multicast/);
    expect(refusedUrl('http://10.11.0.7:49983/', policy)).toMatch(/internal sandbox/);
    expect(refusedAddress('::ffff:169.254.169.254', 80, policy)).toMatch(/link-local/);
  });

  it('refuses loopback unless allowed, and the node API port on loopback always', () => {
    expect(refusedUrl('http://127.0.0.1:9000/', policy)).toMatch(/allow_loopback/);
    expect(refusedUrl('http://localhost:9000/', policy)).toMatch(/allow_loopback/);
    expect(refusedUrl('http://[::1]:9000/', policy)).toMatch(/allow_loopback/);
    expect(refusedAddress('::ffff:127.0.0.1', 9000, policy)).toMatch(/allow_loopback/);
    // Other spellings of an address are the address (the URL parser normalizes them).
    expect(refusedUrl('http://2130706433:9000/', policy)).toMatch(/allow_loopback/);
    expect(refusedUrl('http://0x7f.1:9000/', policy)).toMatch(/allow_loopback/);
    expect(refusedUrl('http://[::ffff:169.254.169.254]/', policy)).toMatch(/link-local/);
    expect(refusedUrl('http://127.0.0.1:9000/', loopbackOk)).toBeUndefined();
    expect(refusedUrl('http://127.0.0.2:3000/', loopbackOk)).toMatch(/own API/);
    expect(refusedUrl('http://localhost:3000/', loopbackOk)).toMatch(/own API/);
  });
});
