import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BuildLogStore, parseLogLevel, selectEntries, type BuildLogLimits } from './build-log.js';

const dirs: string[] = [];
function store(limits?: BuildLogLimits): BuildLogStore {
  const d = mkdtempSync(join(tmpdir(), 'buildlog-'));
  dirs.push(d);
  return new BuildLogStore(d, limits);
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('build logs', () => {
  it('serves entries while running and from the file afterwards (a new store = a restarted server)', async () => {
    const s = store();
    const log = s.open('b1');
    log.add('info', 'starting', 'base');
    const w = log.lineWriter('info', '1', '> ');
    w.write(Buffer.from('one\ntw'));
    w.write(Buffer.from('o\r\nthree'));
    expect((await s.read('b1')).map((e) => e.message)).toEqual(['starting', '> one', '> two']);
    w.flush();
    log.add('error', 'boom', '2');
    await s.finish('b1');
    const again = new BuildLogStore(s.dir);
    const entries = await again.read('b1');
    expect(entries.map((e) => [e.level, e.message, e.step])).toEqual([
      ['info', 'starting', 'base'],
      ['info', '> one', '1'],
      ['info', '> two', '1'],
      ['info', '> three', '1'],
      ['error', 'boom', '2'],
    ]);
    expect(entries[0]!.timestamp).toMatch(/^\d{4}-\d\d-\d\dT.*Z$/);
    await again.appendStored('b1', { level: 'error', message: 'interrupted' });
    expect((await again.read('b1')).at(-1)!.message).toBe('interrupted');
    expect(readFileSync(s.pathOf('b1'), 'utf8').trim().split('\n')).toHaveLength(6);
    await again.remove('b1');
    expect(await again.read('b1')).toEqual([]);
  });

  it('pages and filters by minimum level', () => {
    const e = (level: 'debug' | 'info' | 'warn' | 'error', message: string) => ({
      timestamp: 't',
      level,
      message,
    });
    const all = [e('debug', 'a'), e('info', 'b'), e('warn', 'c'), e('error', 'd'), e('info', 'e')];
    expect(selectEntries(all, { offset: 1, limit: 2 }).map((x) => x.message)).toEqual(['b', 'c']);
    expect(selectEntries(all, { level: 'warn' }).map((x) => x.message)).toEqual(['c', 'd']);
    expect(selectEntries(all, { level: 'info', offset: 3 }).map((x) => x.message)).toEqual(['e']);
    expect(selectEntries(all, { offset: 9 })).toEqual([]);
    expect(parseLogLevel(undefined)).toBeUndefined();
    expect(parseLogLevel('warn')).toBe('warn');
    expect(() => parseLogLevel('loud')).toThrow(/invalid level/);
  });

  it('truncates very long lines', async () => {
    const s = store();
    const log = s.open('b2');
    log.add('info', 'x'.repeat(20_000));
    expect(log.entries[0]!.message.length).toBeLessThan(9000);
    await s.finish('b2');
  });

  it("caps command output by entries, says so once, and keeps aenv's own entries (the failure) after it", async () => {
    const s = store({ maxEntries: 100, maxBytes: 1024 * 1024 });
    const log = s.open('b3');
    log.add('info', 'FROM base', 'base');
    const w = log.lineWriter('info', '1');
    w.write(Buffer.from(Array.from({ length: 5000 }, (_, i) => `line ${i}`).join('\n') + '\n'));
    w.flush();
    log.add('error', 'build failed: exit 1', '1');
    await s.finish('b3');
    const entries = await new BuildLogStore(s.dir).read('b3');
    const truncated = entries.filter((e) => e.message.startsWith('build log truncated'));
    expect(truncated).toHaveLength(1);
    expect(truncated[0]!.message).toContain('100 entries (template_build.max_log_lines)');
    expect(entries.filter((e) => e.message.startsWith('line ')).length).toBeLessThan(100);
    expect(entries.map((e) => e.message)).toContain('build failed: exit 1');
    expect(entries.at(-1)!.message).toMatch(/^\d+ log lines were dropped/);
    expect(entries.length).toBeLessThan(105);
  });

  it('caps command output by bytes (each 8 KiB line counts) and stops writing the file too', async () => {
    const s = store({ maxEntries: 50_000, maxBytes: 1024 * 1024 });
    const log = s.open('b4');
    const w = log.lineWriter('info', '1');
    const long = 'y'.repeat(8000);
    for (let i = 0; i < 1000; i++) w.write(Buffer.from(`${long}\n`));
    w.flush();
    log.add('info', 'template is ready', 'finalize');
    await s.finish('b4');
    const size = readFileSync(s.pathOf('b4')).length;
    expect(size).toBeLessThan(1024 * 1024 + 64 * 1024);
    const entries = await new BuildLogStore(s.dir).read('b4');
    expect(entries.some((e) => e.message.includes('1 MiB (template_build.max_log_mb)'))).toBe(true);
    expect(entries.map((e) => e.message)).toContain('template is ready');
  });
});
