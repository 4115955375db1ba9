import { describe, expect, it } from 'vitest';
import { parseSchedulerArgs } from './cli.js';

describe('aenv scheduler arguments', () => {
  it('takes the reference flags in Go style and GNU style', () => {
    expect(parseSchedulerArgs([])).toEqual({ configPath: undefined, queryOnly: false, help: false });
    expect(parseSchedulerArgs(['-config', '/etc/s.json', '-query-only'])).toEqual({
      configPath: '/etc/s.json',
      queryOnly: true,
      help: false,
    });
    expect(parseSchedulerArgs(['--config=/x.json', '--query-only'])).toMatchObject({
      configPath: '/x.json',
      queryOnly: true,
    });
    expect(parseSchedulerArgs(['-query-only=false', '-config=/y'])).toMatchObject({
      configPath: '/y',
      queryOnly: false,
    });
    expect(parseSchedulerArgs(['-h']).help).toBe(true);
  });

  it('refuses what it does not know', () => {
    expect(() => parseSchedulerArgs(['-config'])).toThrow('-config needs a path');
    expect(() => parseSchedulerArgs(['--verbose'])).toThrow('unknown argument "--verbose"');
    expect(() => parseSchedulerArgs(['extra'])).toThrow('unknown argument "extra"');
    expect(() => parseSchedulerArgs(['-query-only=yes'])).toThrow('takes no value');
  });
});
