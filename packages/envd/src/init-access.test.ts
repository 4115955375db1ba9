// Only the node runs envd's /init (docs/security.md, "envd /init"): the real envd HTTP server, in this process.
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileSignature } from '@aenv/protocol/envd';
import { silentLogger } from './logger.js';
import { startEnvd, type RunningEnvd } from './server.js';

const BOOT_KEY = 'b'.repeat(64);
const NEXT_KEY = 'c'.repeat(64);

describe('envd /init access', () => {
  let dir: string;
  let envd: RunningEnvd;
  let url: string;

  const init = (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    fetch(`${url}/init`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
  const envs = async (token?: string) =>
    (await (
      await fetch(`${url}/envs`, { headers: token ? { 'x-access-token': token } : {} })
    ).json()) as Record<string, string>;

  beforeAll(async () => {
    dir = mkdtempSync('/tmp/aenv-envd-init-');
    envd = await startEnvd({
      port: 0,
      host: '127.0.0.1',
      initPath: '/nonexistent/aenv-init',
      native: undefined,
      statePath: join(dir, 'envd.json'),
      bootInitKey: BOOT_KEY,
      logger: silentLogger,
    });
    url = `http://127.0.0.1:${envd.port}`;
  });
  afterAll(async () => {
    await envd?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses /init without the boot key, whatever else the caller presents', async () => {
    const attempts: Record<string, string>[] = [
      {},
      { 'x-aenv-init-key': 'x' },
      { 'x-aenv-init-key': BOOT_KEY.slice(1) },
    ];
    for (const headers of attempts) {
      const r = await init({ envVars: { PWNED: '1' }, accessToken: 'mine' }, headers);
      expect(r.status).toBe(401);
    }
    expect((await envs()).PWNED).toBeUndefined();
  });

  it('takes /init with the boot key until an /init sets a key of its own, then only that; a token alone is not enough', async () => {
    // An /init that sets no key (a pre-started sandbox's while it waits in the pool) keeps the boot key.
    expect((await init({ envVars: {} }, { 'x-aenv-init-key': BOOT_KEY })).status).toBe(204);
    const r = await init(
      { envVars: { A: '1' }, accessToken: 'tok', initKey: NEXT_KEY },
      { 'x-aenv-init-key': BOOT_KEY },
    );
    expect(r.status).toBe(204);
    expect((await envs('tok')).A).toBe('1');
    expect((await init({ envVars: { B: '2' } }, { 'x-access-token': 'tok' })).status).toBe(401);
    // Every sandbox restored from one checkpoint booted with the same key: it no longer opens this one.
    const withBootKey = await init(
      { envVars: { PWNED: '1' } },
      { 'x-aenv-init-key': BOOT_KEY, 'x-access-token': 'tok' },
    );
    expect(withBootKey.status).toBe(401);
    expect((await init({ envVars: { B: '2' } }, { 'x-aenv-init-key': NEXT_KEY })).status).toBe(204);
    expect((await envs('tok')).B).toBe('2');
    expect((await envs('tok')).PWNED).toBeUndefined();
  });

  it('enforces the signed-URL limits /init gave it', async () => {
    const now = Math.floor(Date.now() / 1000);
    expect(
      (
        await init(
          { signatureMaxLifetimeSecs: 600, unexpiringSignaturesUntil: now - 1 },
          { 'x-aenv-init-key': NEXT_KEY },
        )
      ).status,
    ).toBe(204);
    const file = join(dir, 'f.txt');
    const get = (exp?: string) => {
      const sig = fileSignature(file, 'read', '', 'tok', exp);
      const q = new URLSearchParams({
        path: file,
        signature: sig,
        ...(exp ? { signature_expiration: exp } : {}),
      });
      return fetch(`${url}/files?${q}`);
    };
    const tooFar = await get(String(now + 3600));
    expect(tooFar.status).toBe(401);
    expect(((await tooFar.json()) as { message: string }).message).toMatch(/more than 600 s away/);
    const unexpiring = await get();
    expect(unexpiring.status).toBe(401);
    expect(((await unexpiring.json()) as { message: string }).message).toMatch(/without expiration/);
    // Within the cap the signature is checked as before (here: the file does not exist).
    expect((await get(String(now + 60))).status).toBe(404);
    expect((await init({ signatureMaxLifetimeSecs: -1 }, { 'x-aenv-init-key': NEXT_KEY })).status).toBe(400);
  });
});
