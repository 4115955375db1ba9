import { describe, expect, it } from 'vitest';
import { dropSecretsFromEnvironment, hostToolEnv, isSecretEnvVar, run } from './exec.js';

describe('host command environment', () => {
  it('names the secrets of aenv, of its config and of its callers', () => {
    for (const k of [
      'AENV_API_KEY',
      'E2B_API_KEY',
      'E2B_ACCESS_TOKEN',
      'AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED',
      'AWS_SECRET_ACCESS_KEY',
      'GITHUB_TOKEN',
      'DB_PASSWORD',
    ])
      expect(isSecretEnvVar(k)).toBe(true);
    for (const k of ['PATH', 'HOME', 'LANG', 'XDG_RUNTIME_DIR', 'AENV_HOME_PATH'])
      expect(isSecretEnvVar(k)).toBe(false);
  });

  it('runs host commands without them by default', async () => {
    const saved = process.env.AENV_API_KEY;
    process.env.AENV_API_KEY = 'e2b_planted_in_the_server_env';
    try {
      const r = await run('/bin/sh', ['-c', 'env']);
      expect(r.stdout).toContain('PATH=');
      expect(r.stdout).not.toContain('e2b_planted_in_the_server_env');
    } finally {
      if (saved === undefined) delete process.env.AENV_API_KEY;
      else process.env.AENV_API_KEY = saved;
    }
    expect(hostToolEnv({ PATH: '/bin', AENV_API_KEY: 'k' })).toEqual({ PATH: '/bin' });
  });

  it('drops aenv secrets from an environment in place', () => {
    const env: NodeJS.ProcessEnv = {
      PATH: '/bin',
      AENV_API_KEY: 'k',
      E2B_API_KEY: 'k',
      AENV_LOG_LEVEL: 'info',
    };
    dropSecretsFromEnvironment(env);
    expect(env).toEqual({ PATH: '/bin', AENV_LOG_LEVEL: 'info' });
  });
});
