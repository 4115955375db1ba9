import { describe, expect, it } from 'vitest';
import { DomainError } from '@aenv/protocol';
import { changesDisk, firstForcedStep, parseBuildSpec } from './steps.js';

const HASH = 'a'.repeat(64);
const opts = { defaultImage: 'ubuntu:24.04', uploaded: (h: string) => h === HASH };

function error(body: unknown): DomainError {
  try {
    parseBuildSpec(body, opts);
  } catch (e) {
    expect(e).toBeInstanceOf(DomainError);
    expect((e as DomainError).kind).toBe('invalid_argument');
    return e as DomainError;
  }
  throw new Error('expected an invalid_argument error');
}

describe('parseBuildSpec', () => {
  it('parses what the SDK sends', () => {
    const spec = parseBuildSpec(
      {
        fromImage: 'oci:/x:latest',
        force: false,
        startCmd: 'python -m http.server',
        readyCmd: 'sleep 1',
        steps: [
          { type: 'RUN', args: ['echo hi'], force: false },
          { type: 'RUN', args: ['id', 'root'], force: false },
          { type: 'ENV', args: ['A', '1', 'B', '$A'], force: false },
          { type: 'WORKDIR', args: ['/app'], force: false },
          { type: 'USER', args: ['alice'], force: false },
          {
            type: 'COPY',
            args: ['src/*.js', './src/', '', '0755'],
            force: true,
            filesHash: HASH,
            forceUpload: null,
            gzip: true,
          },
          { type: 'expose', args: ['8080'] },
          { type: 'LABEL', args: ['k', 'v'] },
        ],
      },
      opts,
    );
    expect(spec.base).toEqual({ kind: 'image', ref: 'oci:/x:latest' });
    expect(spec.startCmd).toBe('python -m http.server');
    expect(spec.readyCmd).toBe('sleep 1');
    expect(spec.steps.map((s) => s.kind)).toEqual([
      'run',
      'run',
      'env',
      'workdir',
      'user',
      'copy',
      'expose',
      'label',
    ]);
    expect(spec.steps[1]).toMatchObject({
      kind: 'run',
      cmd: 'id',
      user: 'root',
      index: 2,
      label: 'RUN id',
    });
    expect(spec.steps[2]).toMatchObject({
      vars: [
        ['A', '1'],
        ['B', '$A'],
      ],
    });
    expect(spec.steps[5]).toMatchObject({
      kind: 'copy',
      src: 'src/*.js',
      dest: './src/',
      mode: 0o755,
      force: true,
    });
    expect(spec.steps[5]).not.toHaveProperty('user');
    expect(firstForcedStep(spec)).toBe(5);
    expect(spec.steps.filter(changesDisk).map((s) => s.index)).toEqual([1, 2, 4, 5, 6]);
  });

  it('uses the default image and honours build-level force', () => {
    const spec = parseBuildSpec({ force: true }, opts);
    expect(spec.base).toEqual({ kind: 'image', ref: 'ubuntu:24.04' });
    expect(firstForcedStep(spec)).toBe(0);
    expect(parseBuildSpec({ fromTemplate: 'base' }, opts).base).toEqual({ kind: 'template', ref: 'base' });
  });

  it('keeps registry credentials of fromImageRegistry', () => {
    const spec = parseBuildSpec(
      { fromImage: 'r/x', fromImageRegistry: { type: 'registry', username: 'u', password: 'p' } },
      opts,
    );
    expect(spec.base).toEqual({ kind: 'image', ref: 'r/x', credentials: { username: 'u', password: 'p' } });
    expect(error({ fromImage: 'r/x', fromImageRegistry: { type: 'aws' } }).message).toMatch(/not supported/);
  });

  it('rejects bad requests with the reference messages', () => {
    expect(error({ fromImage: 'a', fromTemplate: 'b' }).message).toBe(
      'cannot specify both fromImage and fromTemplate',
    );
    expect(error({ steps: [{ type: 'HEALTHCHECK', args: [] }] }).message).toBe(
      'template step type HEALTHCHECK is not supported',
    );
    expect(error({ steps: [{ type: 'ENV', args: ['A'] }] }).message).toMatch(/even/);
    expect(error({ steps: [{ type: 'ENV', args: ['1A', 'x'] }] }).message).toMatch(/invalid variable name/);
    expect(error({ steps: [{ type: 'RUN', args: [] }] }).message).toMatch(/needs a command/);
    expect(error({ steps: [{ type: 'WORKDIR', args: [' '] }] }).message).toMatch(/needs a path/);
    expect(error({ steps: [{ type: 'USER', args: ['a b'] }] }).message).toMatch(/invalid user/);
    expect(error({ steps: [{ type: 'COPY', args: ['a', '/b'] }] }).message).toMatch(/needs filesHash/);
    expect(
      error({ steps: [{ type: 'COPY', args: ['a', '/b'], filesHash: 'b'.repeat(64) }] }).message,
    ).toMatch(/were not uploaded/);
    expect(error({ steps: [{ type: 'COPY', args: ['../a', '/b'], filesHash: HASH }] }).message).toMatch(
      /relative/,
    );
    expect(error({ steps: [{ type: 'COPY', args: ['a', '/b', '', '9'], filesHash: HASH }] }).message).toMatch(
      /not octal/,
    );
    expect(error({ steps: 'x' }).message).toMatch(/^invalid build request: steps/);
  });
});
