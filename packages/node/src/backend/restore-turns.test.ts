import { describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { phase, PhaseRecorder, recordPhases } from '../util/phases.js';
import { restoreTurns } from './restore-turns.js';

describe('restore turns', () => {
  it('runs at most N at once, in the order asked, each in its own request: its wait and its phases are its own', async () => {
    const turns = restoreTurns(2);
    let running = 0;
    let most = 0;
    const started: number[] = [];
    const recorders = Array.from({ length: 6 }, () => new PhaseRecorder());
    await Promise.all(
      recorders.map((r, i) =>
        recordPhases(r, () =>
          turns(async () => {
            started.push(i);
            most = Math.max(most, ++running);
            await phase(`restore-${i}`, () => sleep(20));
            running--;
          }),
        ),
      ),
    );
    expect(most).toBe(2);
    expect(started).toEqual([0, 1, 2, 3, 4, 5]);
    for (const [i, r] of recorders.entries()) {
      const names = r.list().map((p) => p.name);
      expect(names).toEqual(['restore-wait', `restore-${i}`]);
    }
    const wait = (i: number) => recorders[i]!.list().find((p) => p.name === 'restore-wait')!.ms;
    expect(wait(0)).toBeLessThan(wait(5));
  });

  it('a failed restore frees its turn', async () => {
    const turns = restoreTurns(1);
    await expect(turns(() => Promise.reject(new Error('criu failed')))).rejects.toThrow('criu failed');
    expect(await turns(() => Promise.resolve('next'))).toBe('next');
  });
});
