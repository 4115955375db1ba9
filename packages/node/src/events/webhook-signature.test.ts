import { describe, expect, it } from 'vitest';
import { webhookSignature } from './webhook-signature.js';

describe('webhookSignature (e2b-signature v1)', () => {
  it('is base64url of sha256(secret + raw body) without padding, as E2B documents', () => {
    // Computed independently: printf '<secret><body>' | openssl dgst -sha256 -binary | base64 | tr '+/' '-_' | tr -d '='
    expect(webhookSignature('secret-for-event-signature-verification', '{"id":"x"}')).toBe(
      'SOgwKGMskMyjFXqj_2uaixkWvLRcy0hTE5_E3ryRIQk',
    );
    // Standard base64 'Wa4vVFAWuGqqUuJYs+a7zKx/hDLXzPFKMroAW31PRgk=': '+' and '/' become '-' and '_'.
    expect(webhookSignature('k', '{"n":17}')).toBe('Wa4vVFAWuGqqUuJYs-a7zKx_hDLXzPFKMroAW31PRgk');
  });

  it('changes with the secret and with any byte of the body', () => {
    const s = webhookSignature('k', '{"a":1}');
    expect(webhookSignature('k2', '{"a":1}')).not.toBe(s);
    expect(webhookSignature('k', '{"a":1} ')).not.toBe(s);
    expect(s).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });
});
