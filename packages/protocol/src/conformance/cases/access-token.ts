// envd's own access-token rules (E2B's): X-Access-Token on every call but the exempt ones, signed /files URLs,
// and /init only for whoever holds the token (an envd without an init key).
import { beforeAll, describe, expect, it } from 'vitest';
import { AuthenticationError, FileType } from 'e2b';
import { ENVD_UNAUTHORIZED_MESSAGE } from '../../envd/headers.js';
import { fileSignature } from '../../envd/signing.js';
import { envdFetch, lacks, sh, q } from '../helpers.js';
import { SECURE } from '../profiles.js';
import type { ConformanceTarget, TargetSandbox } from '../target.js';
import { postInit } from './rest.js';

export function accessTokenCases(target: ConformanceTarget): void {
  describe.skipIf(lacks(target.features, 'envd-auth'))('access token', () => {
    let secure: TargetSandbox;
    let token: string;
    let work: string;
    beforeAll(async () => {
      secure = await target.sandbox(SECURE);
      token = secure.accessToken!;
      work = secure.workdir;
    });

    it('rejects RPC and REST calls without the token with E2B 401 JSON', async () => {
      const res = await envdFetch(secure, '/process.Process/List', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      expect(res.status).toBe(401);
      expect(await res.json()).toEqual({ code: 401, message: ENVD_UNAUTHORIZED_MESSAGE });
      const wrong = await envdFetch(secure, '/envs', { headers: { 'x-access-token': 'nope' } });
      expect(wrong.status).toBe(401);
      expect((await envdFetch(secure, '/health')).status).toBe(204);

      const anonymous = secure.sdk({ withoutToken: true });
      await expect(anonymous.commands.run('true')).rejects.toThrow(AuthenticationError);
      await expect(anonymous.files.read('/etc/hostname')).rejects.toThrow(AuthenticationError);
    });

    it('accepts the token (SDK sends it as X-Access-Token)', async () => {
      const sbx = secure.sdk();
      expect((await sbx.commands.run('echo ok')).stdout).toBe('ok\n');
      await sbx.files.write(`${work}/secure.txt`, 'guarded');
      expect(await sbx.files.read(`${work}/secure.txt`)).toBe('guarded');
      expect((await sbx.files.getInfo(`${work}/secure.txt`)).type).toBe(FileType.FILE);
    });

    it('serves signed download and upload URLs, and rejects bad or expired signatures', async () => {
      const sbx = secure.sdk();
      const path = `${work}/signed.txt`;
      await sbx.files.write(path, 'signed content');
      const down = await sbx.downloadUrl(path);
      expect(new URL(down).searchParams.get('signature')).toMatch(/^v1_/);
      expect(await (await fetch(down)).text()).toBe('signed content');
      const expiring = await sbx.downloadUrl(path, { useSignatureExpiration: 60 });
      expect((await fetch(expiring)).status).toBe(200);

      const tampered = new URL(down);
      tampered.searchParams.set('path', `${work}/other.txt`);
      expect((await fetch(tampered)).status).toBe(401);
      const past = String(Math.floor(Date.now() / 1000) - 10);
      const expired = new URL(`${secure.url}/files`);
      expired.searchParams.set('path', path);
      expired.searchParams.set('signature', fileSignature(path, 'read', '', token, past));
      expired.searchParams.set('signature_expiration', past);
      const expiredRes = await fetch(expired);
      expect(expiredRes.status).toBe(401);
      expect(((await expiredRes.json()) as { message: string }).message).toBe('signature is already expired');
      expect((await envdFetch(secure, `/files?path=${encodeURIComponent(path)}`)).status).toBe(401);

      const up = await sbx.uploadUrl(`${work}/signed-up.txt`);
      const form = new FormData();
      form.append('file', new Blob(['uploaded via signed url']), 'x.txt');
      expect((await fetch(up, { method: 'POST', body: form })).status).toBe(200);
      expect(await sh(secure, `cat ${q(`${work}/signed-up.txt`)}`)).toBe('uploaded via signed url');
      const readSig = new URL(down).searchParams.get('signature')!;
      const misuse = `${secure.url}/files?path=${encodeURIComponent(path)}&signature=${readSig}`;
      expect((await fetch(misuse, { method: 'POST', body: form })).status).toBe(401);
    });

    it.skipIf(lacks(target.features, 'envd-init'))('lets only the token holder re-run /init', async () => {
      expect((await postInit(secure, { accessToken: 'stolen' })).status).toBe(401);
      expect((await postInit(secure, { accessToken: 'stolen' }, 'wrong')).status).toBe(401);
      expect((await postInit(secure, { envVars: { B: '2' } }, token)).status).toBe(204);
      const envs = await envdFetch(secure, '/envs', { headers: { 'x-access-token': token } });
      expect(((await envs.json()) as Record<string, string>).B).toBe('2');
    });
  });
}
