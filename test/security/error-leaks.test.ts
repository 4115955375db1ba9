// Class "what the server hands out about itself" (docs/security.md, "Error answers" and "Host commands"): the
// credential process of the S3 repository runs without the server's secrets, and an internal failure answers
// with a request id, not with the host paths, command lines and stderr it carries; those go to the log.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { eventually, startServer, type TestServer } from '../e2e/harness.js';
import { expectErrorShape, expectHealthy, httpRequest, rawExchange } from './lib.js';

const S3 = {
  endpoint: process.env.AENV_TEST_S3_ENDPOINT ?? 'http://127.0.0.1:9000',
  bucket: process.env.AENV_TEST_S3_BUCKET ?? 'aenv-test',
  region: process.env.AENV_TEST_S3_REGION ?? 'us-east-1',
  accessKey: process.env.AENV_TEST_S3_ACCESS_KEY ?? 'aenvtest',
  secretKey: process.env.AENV_TEST_S3_SECRET_KEY ?? 'aenvtestsecret',
};

// Prints short-lived credentials (so it runs for every S3 call), records the environment it was given, and
// fails like a real helper would, naming a host path, while a `fail` file exists in its directory.
const CREDENTIAL_SCRIPT = `import { existsSync, writeFileSync } from 'node:fs';
const dir = process.argv[2];
writeFileSync(dir + '/env.json', JSON.stringify(process.env));
if (existsSync(dir + '/fail')) {
  process.stderr.write('cannot open /srv/secret-vault/node-creds.sock: permission denied\\n');
  process.exit(3);
}
console.log(JSON.stringify({
  Version: 1,
  AccessKeyId: ${JSON.stringify(S3.accessKey)},
  SecretAccessKey: ${JSON.stringify(S3.secretKey)},
  Expiration: new Date(Date.now() + 60_000).toISOString(),
}));
`;

describe('secrets and internals stay on the host', () => {
  let server: TestServer;
  const apiKey = `e2b_${randomBytes(24).toString('hex')}`;
  const planted = {
    AENV_API_KEY: apiKey,
    E2B_API_KEY: apiKey,
    AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: `planted-seed-${randomBytes(12).toString('hex')}`,
    DEPLOY_TOKEN: `planted-token-${randomBytes(12).toString('hex')}`,
  };
  const dir = mkdtempSync('/tmp/aenv-sreq3-creds-');
  const script = join(dir, 'creds.mjs');

  beforeAll(async () => {
    writeFileSync(script, CREDENTIAL_SCRIPT);
    // The harness reads the key from the managed file; the server itself takes it from AENV_API_KEY.
    const home = '/var/lib/aenv-e2e/sreq3';
    mkdirSync(home, { recursive: true });
    chmodSync(home, 0o711); // sandbox uids traverse it (as the harness makes it)
    mkdirSync(join(home, 'secrets'), { recursive: true, mode: 0o700 });
    writeFileSync(join(home, 'secrets', 'api-key'), `${apiKey}\n`, { mode: 0o600 });
    server = await startServer({
      name: 'sreq3',
      env: planted,
      toml: [
        '[template_build]',
        'base_template_image = ""',
        '[snapshot]',
        'repository_backend = "oss"',
        '[backend.oss]',
        `endpoint = "${S3.endpoint}"`,
        `bucket = "${S3.bucket}"`,
        `region = "${S3.region}"`,
        'addressing_style = "path"',
        `prefix = "sreq3-${randomBytes(6).toString('hex')}/"`,
        `credential_process = "${process.execPath} ${script} ${dir}"`,
      ].join('\n'),
    });
  });
  afterAll(async () => {
    if (server) expect(await server.shutdown()).toBe(0);
    rmSync(dir, { recursive: true, force: true });
  });

  it('runs credential_process without the API key, the token seed or other secrets', async () => {
    expect(server.apiKey).toBe(apiKey);
    expect((await server.api('GET', '/templates')).status).toBe(200);
    expect(existsSync(join(dir, 'env.json'))).toBe(true);
    const seen = JSON.parse(readFileSync(join(dir, 'env.json'), 'utf8')) as Record<string, string>;
    expect(seen.PATH).toBeTruthy();
    const text = JSON.stringify(seen);
    for (const [name, value] of Object.entries(planted)) {
      expect(seen, name).not.toHaveProperty(name);
      expect(text.includes(value), `${name}'s value`).toBe(false);
    }
  });

  it('answers an internal failure with a request id; the details are in the log under that id', async () => {
    writeFileSync(join(dir, 'fail'), '');
    try {
      const r = await rawExchange(
        server.port,
        httpRequest('GET /templates HTTP/1.1', [`X-API-Key: ${apiKey}`]),
      );
      expectErrorShape(r, 500);
      const { message } = JSON.parse(r.body) as { message: string };
      const id = r.headers['x-request-id']!;
      expect(id).toMatch(/^[0-9a-f]{16}$/);
      expect(message).toContain(`request id ${id}`);
      for (const secret of [
        '/srv/secret-vault',
        script,
        dir,
        process.execPath,
        'credential_process',
        'exited with',
      ])
        expect(message).not.toContain(secret);
      await eventually(
        () =>
          server
            .logs()
            .split('\n')
            .some(
              (l) => l.includes(`"requestId":"${id}"`) && l.includes('/srv/secret-vault/node-creds.sock'),
            ),
        'the failure details to be logged under the request id',
      );
    } finally {
      rmSync(join(dir, 'fail'), { force: true });
    }
    await expectHealthy(server);
    expect((await server.api('GET', '/templates')).status).toBe(200);
  });
});
