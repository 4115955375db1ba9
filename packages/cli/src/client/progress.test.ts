import { describe, expect, it } from 'vitest';
import { Progress, progressMode } from './progress.js';

describe('progressMode', () => {
  it('spins only on an interactive terminal; -o json and --quiet silence it', () => {
    const tty = { isTTY: true };
    expect(progressMode({}, tty, { TERM: 'xterm' })).toBe('spinner');
    expect(progressMode({}, tty, { TERM: 'dumb' })).toBe('lines');
    expect(progressMode({}, tty, { TERM: 'xterm', CI: 'true' })).toBe('lines');
    expect(progressMode({}, { isTTY: false }, {})).toBe('lines');
    expect(progressMode({ outputFlag: 'table' }, { isTTY: false }, {})).toBe('lines');
    expect(progressMode({ outputFlag: 'json' }, tty, { TERM: 'xterm' })).toBe('silent');
    expect(progressMode({ quiet: true }, tty, { TERM: 'xterm' })).toBe('silent');
  });
});

describe('Progress', () => {
  const record = (mode: 'lines' | 'silent') => {
    const out: string[] = [];
    return { p: new Progress(mode, (s) => void out.push(s)), out };
  };

  it('prints each new status and every log line as plain lines', async () => {
    const { p, out } = record('lines');
    p.start('building template web');
    p.log('step output');
    p.update('building template web');
    p.update('building template web: building, step 2');
    p.stop({ ok: true, text: 'ready' });
    expect(await p.run('pausing x', () => Promise.resolve(7))).toBe(7);
    await expect(p.run('resuming x', () => Promise.reject(new Error('no')))).rejects.toThrow('no');
    expect(out.join('')).toBe(
      'building template web\nstep output\nbuilding template web: building, step 2\npausing x\nresuming x\n',
    );
  });

  it('prints nothing when silent', () => {
    const { p, out } = record('silent');
    p.start('a');
    p.log('b');
    p.update('c');
    p.stop();
    expect(out).toEqual([]);
  });
});
