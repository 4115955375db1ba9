import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import type { PulledImage } from '../image/index.js';
import {
  contextOf,
  expansionScript,
  needsExpansion,
  recordExpose,
  resolveWorkdir,
  stateFromContext,
  stateFromImage,
} from './build-state.js';

function image(config: Partial<PulledImage['config']>): PulledImage {
  return {
    reference: 'x',
    manifestDigest: 'sha256:0',
    layers: [],
    config: { env: [], exposedPorts: [], volumes: [], labels: {}, ...config },
  };
}

describe('build state', () => {
  it('starts from the image config, as user `user` unless the image names one', () => {
    const s = stateFromImage(
      image({ env: ['PATH=/bin', 'A=1=2', 'bad'], workingDir: '/srv', exposedPorts: ['80/tcp'] }),
    );
    expect(s).toMatchObject({
      env: { PATH: '/bin', A: '1=2' },
      workdir: '/srv',
      user: 'user',
      exposedPorts: ['80/tcp'],
    });
    expect(stateFromImage(image({ user: 'www:www', workingDir: '/' }))).toMatchObject({ user: 'www' });
    expect(stateFromImage(image({ workingDir: '/' })).workdir).toBeUndefined();
  });

  it('round-trips through the committed context ("/" = no workdir)', () => {
    const s = stateFromImage(image({ env: ['A=1'] }));
    recordExpose(s, '8080');
    recordExpose(s, '8080');
    const ctx = contextOf(s);
    expect(ctx).toMatchObject({ workdir: '/', user: 'user', exposedPorts: ['8080/tcp'] });
    expect(stateFromContext(ctx)).toEqual(s);
  });

  it('resolves WORKDIR like Docker', () => {
    expect(resolveWorkdir(undefined, '/home/user', 'app')).toBe('/home/user/app');
    expect(resolveWorkdir('/srv', '/home/user', '../x/./y/')).toBe('/x/y');
    expect(resolveWorkdir('/srv', '/home/user', '/abs')).toBe('/abs');
  });

  it('expands ENV values as a double-quoted shell string would', () => {
    expect(needsExpansion('plain')).toBe(false);
    expect(needsExpansion('$HOME/x')).toBe(true);
    const sh = (v: string, env: Record<string, string>) =>
      execFileSync('/bin/sh', ['-c', 'eval "$1"', 'x', expansionScript(v)], { env }).toString();
    expect(sh('$A:${B}-"q" \\ `echo c`', { A: 'a', B: 'b' })).toBe('a:b-"q" \\ c');
  });
});
