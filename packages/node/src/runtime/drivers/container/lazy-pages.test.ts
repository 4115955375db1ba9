import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkpointPageBytes, stopLazyPages, waitLazyPages } from './lazy-pages.js';

const dir = mkdtempSync(join(tmpdir(), 'aenv-lazy-pages-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('checkpointPageBytes', () => {
  it('counts the pages-N.img files only', async () => {
    const images = join(dir, 'images');
    rmSync(images, { recursive: true, force: true });
    mkdirSync(images);
    writeFileSync(join(images, 'pages-1.img'), Buffer.alloc(8192));
    writeFileSync(join(images, 'pages-12.img'), Buffer.alloc(4096));
    writeFileSync(join(images, 'pagemap-1.img'), Buffer.alloc(100));
    writeFileSync(join(images, 'pages-1.img.bak'), Buffer.alloc(100));
    expect(await checkpointPageBytes(images)).toBe(12288);
  });
});

describe('the daemon of a work dir', () => {
  it('is only a lazy-pages process naming that work dir: another process under a reused pid is left alone', async () => {
    const work = join(dir, 'work-reused');
    mkdirSync(work);
    // A process that names the work dir but is no lazy-pages daemon, and one that is neither.
    const other = spawn('bash', ['-c', 'sleep 30; true', 'not-the-daemon', work], { stdio: 'ignore' });
    try {
      writeFileSync(join(work, 'lazy-pages.pid'), `${other.pid}\n`);
      expect(await stopLazyPages(work)).toBe(false);
      await waitLazyPages(work, 1000);
      expect(other.exitCode).toBeNull();
      writeFileSync(join(work, 'lazy-pages.pid'), `${process.pid}\n`);
      expect(await stopLazyPages(work)).toBe(false);
    } finally {
      other.kill('SIGKILL');
    }
  });

  it('is stopped when it runs: SIGKILL, then gone', async () => {
    const work = join(dir, 'work-live');
    mkdirSync(work);
    // Same argv shape as the daemon (`lazy-pages ... <work>`), run by a harmless binary.
    const fake = spawn('bash', ['-c', 'sleep 30; true', 'lazy-pages', work], { stdio: 'ignore' });
    const exited = new Promise((r) => fake.on('exit', r));
    writeFileSync(join(work, 'lazy-pages.pid'), `${fake.pid}\n`);
    await expect(waitLazyPages(work, 100)).rejects.toThrow(/has not fetched all pages/);
    expect(await stopLazyPages(work)).toBe(true);
    await exited;
    expect(await stopLazyPages(work)).toBe(false);
  });
});
