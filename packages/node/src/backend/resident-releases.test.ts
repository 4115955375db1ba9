// The bookkeeping of background memory releases: which container id a new instance may use while an old one is
// still being released, and who waits for what. The host side is test/e2e/background-release.test.ts.
import { describe, expect, it } from 'vitest';
import { createLogger } from '../util/log.js';
import { ResidentReleases } from './resident-releases.js';

const logger = createLogger('json', 'error', { write: () => {} });

function gate(): { open(): void; wait: Promise<void> } {
  let open = () => {};
  const wait = new Promise<void>((r) => (open = r));
  return { open, wait };
}

describe('ResidentReleases', () => {
  it('gives a new instance an id no release in flight holds, and the sandbox id again once it is free', async () => {
    const rel = new ResidentReleases(logger);
    expect(rel.freeContainerId('s1')).toBe('s1');
    const first = gate();
    rel.start('s1', 's1', () => first.wait);
    expect(rel.busy('s1', 's1')).toBe(true);
    expect(rel.freeContainerId('s1')).toBe('s1-r1');
    const second = gate();
    rel.start('s1', 's1-r1', () => second.wait);
    expect(rel.freeContainerId('s1')).toBe('s1-r2');
    expect(rel.freeContainerId('s2')).toBe('s2');
    first.open();
    second.open();
    await rel.idle();
    expect(rel.busy('s1', 's1-r1')).toBe(false);
    expect(rel.freeContainerId('s1')).toBe('s1');
  });

  it('a release waits for the resume of its sandbox in progress, and starts at once for a kill', async () => {
    const rel = new ResidentReleases(logger);
    const trail: string[] = [];
    const resume = gate();
    const resumed = rel.resuming('s1', async () => {
      rel.start('s1', 's1', async () => {
        trail.push('released');
      });
      await resume.wait;
      trail.push('resumed');
    });
    // A kill would wait for the release: it does not wait for the start delay, but still for the resume.
    const settled = rel.settled('s1').then(() => trail.push('settled'));
    resume.open();
    await resumed;
    await settled;
    expect(trail).toEqual(['resumed', 'released', 'settled']);
  });

  it('settled waits for every release of that sandbox only; a failed release settles too', async () => {
    const rel = new ResidentReleases(logger);
    const trail: string[] = [];
    const a = gate();
    const b = gate();
    rel.start('s1', 's1', async () => {
      await a.wait;
      trail.push('s1 released');
      throw new Error('destroy failed');
    });
    rel.start('s2', 's2', async () => {
      await b.wait;
      trail.push('s2 released');
    });
    const settled = rel.settled('s1').then(() => trail.push('s1 settled'));
    a.open();
    await settled;
    expect(trail).toEqual(['s1 released', 's1 settled']);
    b.open();
    await rel.idle();
    expect(trail).toEqual(['s1 released', 's1 settled', 's2 released']);
  });

  it('a second release of the same container runs after the first', async () => {
    const rel = new ResidentReleases(logger);
    const trail: string[] = [];
    const a = gate();
    rel.start('s1', 's1', async () => {
      await a.wait;
      trail.push('first');
    });
    rel.start('s1', 's1', async () => {
      trail.push('second');
    });
    a.open();
    await rel.settled('s1');
    expect(trail).toEqual(['first', 'second']);
  });
});
