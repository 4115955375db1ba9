import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { validateInitBody } from '@aenv/protocol/envd';
import { silentLogger } from '../logger.js';
import { EnvdState } from './envd-state.js';

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

describe('EnvdState', () => {
  it('merges env vars, builds the global env and persists across restarts', () => {
    dir = mkdtempSync('/tmp/aenv-envd-state-');
    const statePath = join(dir, 'sub', 'envd.json');
    const a = new EnvdState({ statePath, sandboxId: 'sbx', templateId: 'tpl', logger: silentLogger });
    expect(a.defaultUser).toBe('root');
    a.applyInit(
      validateInitBody({ envVars: { A: '1' }, accessToken: 'tok', defaultUser: 'user', volumeMounts: [] }),
    );
    a.applyInit(validateInitBody({ envVars: { B: '2' }, defaultWorkdir: '/w' }));
    expect(a.globalEnv()).toEqual({
      A: '1',
      B: '2',
      E2B_SANDBOX: 'true',
      E2B_SANDBOX_ID: 'sbx',
      E2B_TEMPLATE_ID: 'tpl',
    });
    expect(statSync(statePath).mode & 0o777).toBe(0o600);

    const b = new EnvdState({ statePath, logger: silentLogger });
    expect(b.accessToken).toBe('tok');
    expect(b.defaultUser).toBe('user');
    expect(b.defaultWorkdir).toBe('/w');
    expect(b.globalEnv().A).toBe('1');
  });
});
