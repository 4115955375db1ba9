import { describe, expect, it } from 'vitest';
import {
  detached,
  notePhase,
  parseServerTiming,
  phase,
  PhaseRecorder,
  recordPhases,
  serverTimingHeader,
} from './phases.js';

const tick = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

describe('phase recording', () => {
  it('records the phases of the current request at any depth, summing repeated ones, and ignores detached work', async () => {
    const rec = new PhaseRecorder();
    let background: Promise<void> | undefined;
    await recordPhases(rec, async () => {
      await phase('slot', () => tick(2));
      await Promise.all([phase('runtime', () => tick(2)), phase('runtime', () => tick(2))]);
      notePhase('lock-wait', 1.5);
      background = detached(() => phase('warm-boot', () => tick(1)));
      await expect(phase('envd-init', () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    });
    await background;
    const list = rec.list();
    expect(list.map((p) => [p.name, p.runs])).toEqual([
      ['slot', 1],
      ['runtime', 2],
      ['lock-wait', 1],
      ['envd-init', 1],
    ]);
    expect(list.find((p) => p.name === 'lock-wait')!.ms).toBe(1.5);
  });

  it('runs the function alone when nothing records', async () => {
    expect(await phase('x', async () => 7)).toBe(7);
    notePhase('y', 1);
  });

  it('writes and reads Server-Timing, and refuses a name that is no HTTP token', () => {
    const rec = new PhaseRecorder();
    rec.add('slot', 1.234);
    rec.add('runtime', 10);
    rec.add('runtime', 5);
    const h = serverTimingHeader(rec, 20);
    expect(h).toBe('slot;dur=1.2, runtime;dur=15.0;desc="2 runs", total;dur=20.0');
    expect(parseServerTiming(h)).toEqual([
      { name: 'slot', ms: 1.2, runs: 1 },
      { name: 'runtime', ms: 15, runs: 2 },
      { name: 'total', ms: 20, runs: 1 },
    ]);
    rec.add('bad name', 1);
    expect(() => serverTimingHeader(rec, 1)).toThrow(/not an HTTP token/);
  });
});
