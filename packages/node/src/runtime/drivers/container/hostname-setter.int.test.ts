// The long-lived hostname helper against real UTS namespaces (processes in their own, made with unshare). Root only.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../../util/exec.js';
import { HostnameSetter } from './hostname-setter.js';
import { buildIdmapHelper } from './idmap-helper.js';

const IS_ROOT = process.getuid?.() === 0;

describe.skipIf(!IS_ROOT)('HostnameSetter', () => {
  let dir: string;
  let helper: string;
  const children: ChildProcess[] = [];

  /** A process in a UTS namespace of its own (it sleeps until the test ends). */
  async function ownUts(): Promise<number> {
    const child = spawn('unshare', ['--uts', 'sleep', '300'], { stdio: 'ignore' });
    children.push(child);
    const pid = child.pid!;
    // unshare execs sleep in the same process once the namespace is made.
    for (let i = 0; i < 200; i++) {
      if ((await run('readlink', [`/proc/${pid}/exe`], { allowFailure: true })).stdout.includes('sleep'))
        return pid;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error('unshare did not start');
  }
  const nameOf = async (pid: number) =>
    (await run('nsenter', [`--uts=/proc/${pid}/ns/uts`, 'hostname'])).stdout.trim();

  beforeAll(async () => {
    dir = await mkdtemp('/var/tmp/aenv-hostname-test-');
    helper = await buildIdmapHelper(dir);
  });
  afterAll(async () => {
    for (const c of children) c.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  });

  it('names each namespace, concurrently, without touching its own', async () => {
    const own = hostname();
    const [a, b] = await Promise.all([ownUts(), ownUts()]);
    const setter = new HostnameSetter([helper, 'hostnames']);
    await Promise.all([setter.set(a, 'sbx-a'), setter.set(b, 'sbx-b'), setter.set(a, 'sbx-a2')]);
    expect(await nameOf(a)).toBe('sbx-a2');
    expect(await nameOf(b)).toBe('sbx-b');
    expect(hostname()).toBe(own);
    setter.close();
  });

  it('fails one request with the reason and keeps serving the next', async () => {
    const a = await ownUts();
    const setter = new HostnameSetter([helper, 'hostnames']);
    await expect(setter.set(2 ** 30, 'gone')).rejects.toThrow(/open \/proc\/1073741824\/ns\/uts/);
    await expect(setter.set(a, 'bad name')).rejects.toThrow(/cannot set hostname/);
    await setter.set(a, 'after-errors');
    expect(await nameOf(a)).toBe('after-errors');
    setter.close();
  });

  it('starts the helper again after it went away', async () => {
    const a = await ownUts();
    const setter = new HostnameSetter([helper, 'hostnames']);
    await setter.set(a, 'first');
    setter.close();
    await setter.set(a, 'second');
    expect(await nameOf(a)).toBe('second');
    setter.close();
  });

  it('fails what it was asked when the helper cannot run', async () => {
    const setter = new HostnameSetter([join(dir, 'no-such-helper'), 'hostnames']);
    await expect(setter.set(2 ** 30, 'x')).rejects.toThrow(/hostname helper did not run/);
  });
});
