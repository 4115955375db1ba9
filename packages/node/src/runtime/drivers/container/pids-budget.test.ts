import { describe, expect, it } from 'vitest';
import { resolvePidsBudget } from './pids-budget.js';

describe('resolvePidsBudget', () => {
  it('gives the node half of pid_max and each sandbox a sixteenth of that, bounded', () => {
    expect(resolvePidsBudget({ node: 0, perSandbox: 0 }, 32768)).toEqual({ node: 16384, perSandbox: 1024 });
    expect(resolvePidsBudget({ node: 0, perSandbox: 0 }, 4194304)).toEqual({
      node: 2097152,
      perSandbox: 4096,
    });
    expect(resolvePidsBudget({ node: 500, perSandbox: 0 }, 32768)).toEqual({ node: 500, perSandbox: 64 });
    expect(resolvePidsBudget({ node: 40, perSandbox: 0 }, 32768)).toEqual({ node: 40, perSandbox: 40 });
  });

  it('takes explicit values, and refuses a sandbox limit above the node budget or a budget at pid_max', () => {
    expect(resolvePidsBudget({ node: 2000, perSandbox: 300 }, 32768)).toEqual({
      node: 2000,
      perSandbox: 300,
    });
    expect(() => resolvePidsBudget({ node: 2000, perSandbox: 3000 }, 32768)).toThrow(
      /pids_limit = 3000: is above runtime.node_pids_limit \(2000\)/,
    );
    expect(() => resolvePidsBudget({ node: 32768, perSandbox: 0 }, 32768)).toThrow(
      /below the kernel's pid_max/,
    );
  });
});
