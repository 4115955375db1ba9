import { describe, expect, it } from 'vitest';
import { exitStatus } from './exit-status.js';

describe('exitStatus', () => {
  it('reports exits like Go ProcessState', () => {
    expect(exitStatus(0, null)).toEqual({ exitCode: 0, exited: true, status: 'exit status 0' });
    expect(exitStatus(3, null)).toEqual({
      exitCode: 3,
      exited: true,
      status: 'exit status 3',
      error: 'exit status 3',
    });
  });

  it('reports signals with exit code -1 and Go signal names', () => {
    expect(exitStatus(null, 'SIGKILL')).toEqual({
      exitCode: -1,
      exited: false,
      status: 'signal: killed',
      error: 'signal: killed',
    });
    expect(exitStatus(null, 'SIGTERM').status).toBe('signal: terminated');
    expect(exitStatus(0, 2).status).toBe('signal: interrupt');
    expect(exitStatus(null, 'SIGSEGV').status).toBe('signal: segmentation fault');
  });
});
