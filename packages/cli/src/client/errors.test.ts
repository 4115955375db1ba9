import { describe, expect, it } from 'vitest';
import { CommanderError } from 'commander';
import { AenvApiError, AenvApiUnreachableError, Code, ConnectError, EnvdRestError } from '@aenv/protocol';
import { CliError, describeError } from './errors.js';
import { EXIT, kindOfStatus } from './exit-codes.js';

describe('exit codes', () => {
  it('are distinct per kind', () => {
    const codes = Object.values(EXIT);
    expect(new Set(codes).size).toBe(codes.length);
  });

  it('follow the HTTP status, or a 4xx code inside a 500 answer', () => {
    expect(kindOfStatus(400)).toBe('usage');
    expect(kindOfStatus(422)).toBe('usage');
    expect(kindOfStatus(401)).toBe('auth');
    expect(kindOfStatus(403)).toBe('auth');
    expect(kindOfStatus(404)).toBe('notFound');
    expect(kindOfStatus(409)).toBe('conflict');
    expect(kindOfStatus(410)).toBe('conflict');
    expect(kindOfStatus(500)).toBe('server');
    expect(kindOfStatus(503)).toBe('server');
    expect(kindOfStatus(500, 400)).toBe('usage');
    expect(kindOfStatus(500, 500)).toBe('server');
  });
});

describe('describeError', () => {
  it('gives one line naming the call, the status, the message and what to do', () => {
    const e = AenvApiError.fromAnswer(
      404,
      '{"code":404,"message":"sandbox x not found"}',
      'GET /sandboxes/x',
    );
    expect(describeError(e)).toEqual({
      exitCode: EXIT.notFound,
      line: 'error: GET /sandboxes/x failed (HTTP 404): sandbox x not found; check the id or name (`aenv list`, `aenv template list`, `aenv snapshot list`)',
    });
    const conflict = AenvApiError.fromAnswer(409, '{"code":409,"message":"sandbox is paused"}', 'POST /x');
    expect(describeError(conflict).exitCode).toBe(EXIT.conflict);
    const plain = AenvApiError.fromAnswer(502, 'bad gateway\nmore', 'GET /v2/sandboxes');
    expect(describeError(plain)).toEqual({
      exitCode: EXIT.server,
      line: 'error: GET /v2/sandboxes failed (HTTP 502): HTTP 502: bad gateway more; the server logs say more',
    });
  });

  it('names a route the server does not serve', () => {
    const e = AenvApiError.fromAnswer(
      404,
      '{"code":404,"message":"route not found: POST /sandboxes-cold"}',
      'POST /sandboxes-cold',
    );
    const d = describeError(e);
    expect(d.exitCode).toBe(EXIT.failure);
    expect(d.line).toContain('POST /sandboxes-cold: this server does not serve it');
  });

  it('maps unreachable servers, envd errors, local files and usage', () => {
    const un = new AenvApiUnreachableError('GET /v2/sandboxes', { cause: new Error('connect ECONNREFUSED') });
    expect(describeError(un).exitCode).toBe(EXIT.unreachable);
    expect(describeError(un).line).toContain('set its address with `aenv auth`');
    expect(describeError(new ConnectError('no such file', Code.NotFound)).exitCode).toBe(EXIT.notFound);
    expect(describeError(new ConnectError('late', Code.DeadlineExceeded)).exitCode).toBe(EXIT.timedOut);
    expect(describeError(new EnvdRestError('envd download of /x answered 404: nope', 404)).exitCode).toBe(
      EXIT.notFound,
    );
    const enoent = Object.assign(new Error("ENOENT: no such file, open 'x'"), { code: 'ENOENT' });
    expect(describeError(enoent).exitCode).toBe(EXIT.notFound);
    expect(describeError(new CliError('usage', 'bad', 'do this'))).toEqual({
      exitCode: EXIT.usage,
      line: 'error: bad; do this',
    });
    expect(describeError(new CommanderError(1, 'commander.unknownOption', 'x')).exitCode).toBe(EXIT.usage);
    expect(describeError(new CommanderError(0, 'commander.helpDisplayed', 'x')).exitCode).toBe(EXIT.ok);
  });

  it('adds the stack only with --debug', () => {
    const e = new Error('boom');
    expect(describeError(e).line).toBe('error: boom');
    expect(describeError(e, true).line).toMatch(/^error: boom\nError: boom\n\s+at /);
  });
});
