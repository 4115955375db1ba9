import { describe, expect, it } from 'vitest';
import { Code, ConnectError, EnvdCommandError } from '@aenv/protocol';
import { copySourcePrefix, directoryMode, runCommandFailure } from './step-runner.js';

describe('COPY helpers', () => {
  it('takes the source up to its first glob component (the SDK already chose the files)', () => {
    expect(copySourcePrefix('hello.txt')).toBe('hello.txt');
    expect(copySourcePrefix('./dir/')).toBe('dir');
    expect(copySourcePrefix('src/*.js')).toBe('src');
    expect(copySourcePrefix('a/b/**/c')).toBe('a/b');
    expect(copySourcePrefix('*')).toBe('');
    expect(copySourcePrefix('.')).toBe('');
  });

  it('gives directories search permission where they are readable', () => {
    expect(directoryMode(0o644)).toBe(0o755);
    expect(directoryMode(0o600)).toBe(0o700);
    expect(directoryMode(0o640)).toBe(0o750);
    expect(directoryMode(0o755)).toBe(0o755);
  });
});

describe('RUN step failures', () => {
  const fail = runCommandFailure('whoami');

  it('words a non-zero exit as E2B does', () => {
    expect(fail.exited({ exitCode: 3, status: 'exit status 3' }, 'last line')).toBe(
      "failed to run command 'whoami': exit status 3",
    );
    expect(fail.exited({ exitCode: -1, status: 'signal: killed' }, '')).toBe(
      "failed to run command 'whoami': signal: killed",
    );
  });

  it("words envd's refusal with Go's name of the Connect code", () => {
    const refused = new EnvdCommandError('envd could not run /bin/bash: …', Code.Unauthenticated, {
      cause: new ConnectError("invalid username: 'root123'", Code.Unauthenticated),
    });
    expect(fail.broken(refused)).toBe(
      "failed to run command 'whoami': command failed: unauthenticated: invalid username: 'root123'",
    );
    const lost = new EnvdCommandError('x', Code.DeadlineExceeded, {
      cause: new ConnectError('gone', Code.DeadlineExceeded),
    });
    expect(fail.broken(lost)).toBe("failed to run command 'whoami': command failed: deadline_exceeded: gone");
    expect(fail.broken(new Error('socket hang up'))).toBe(
      "failed to run command 'whoami': command failed: socket hang up",
    );
  });
});
