// The process launcher with its real program (launcher-main.ts, run by tsx) and real host commands.
import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { Launcher } from './launcher.js';
import type { SpawnRequest } from './spawn-collect.js';

const script = fileURLToPath(new URL('./launcher-main.ts', import.meta.url));
const execArgv = ['--import', 'tsx'];
const launcher = new Launcher(script, { env: process.env, execArgv }).start();
afterAll(() => launcher.close());

const req = (command: string, args: string[], more: Partial<SpawnRequest> = {}): SpawnRequest => ({
  command,
  args,
  env: { PATH: process.env.PATH, ONLY: 'this' },
  stdio: 'collect',
  ...more,
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function gone(pid: number): Promise<boolean> {
  for (let i = 0; i < 100 && alive(pid); i++) await new Promise((r) => setTimeout(r, 50));
  return !alive(pid);
}

describe('Launcher', () => {
  it('runs a command in another process with the request’s env, cwd and stdin, and returns its output and exit code', async () => {
    const out = await launcher.run(
      req('sh', ['-c', 'echo "$ONLY $(pwd) $PPID"; cat; echo err >&2; exit 3'], { cwd: '/tmp', input: 'in' }),
    );
    expect(out.code).toBe(3);
    expect(out.stdout).toBe(`this /tmp ${launcher.pid}\nin`);
    expect(out.stderr).toBe('err\n');
    expect(launcher.pid).not.toBe(process.pid);
  });

  it('runs many commands at once, each answered with its own result', async () => {
    const outs = await Promise.all(
      Array.from({ length: 40 }, (_, i) => launcher.run(req('sh', ['-c', `echo ${i}; exit ${i % 7}`]))),
    );
    outs.forEach((o, i) => {
      expect(o.stdout).toBe(`${i}\n`);
      expect(o.code).toBe(i % 7);
    });
  });

  it('rejects with spawn’s own error code when the command cannot start', async () => {
    await expect(launcher.run(req('/nonexistent/tool', []))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('kills a command at its time limit (code null) and answers at exit with stdio ignored', async () => {
    const killed = await launcher.run(req('sleep', ['30'], { timeoutMs: 100 }));
    expect(killed.code).toBeNull();
    // The answer comes at the command's exit, not when a process it left running ends.
    const pidFile = join(tmpdir(), `aenv-launcher-${process.pid}`);
    const quiet = await launcher.run(
      req('sh', ['-c', `sleep 30 & echo $! > ${pidFile}; exit 4`], { stdio: 'ignore' }),
    );
    expect(quiet).toEqual({ code: 4, stdout: '', stderr: '' });
    const left = Number(readFileSync(pidFile, 'utf8'));
    rmSync(pidFile);
    expect(alive(left)).toBe(true);
    process.kill(left, 'SIGKILL');
  });

  it('fails the requests in flight when the launcher dies, and starts a new one for the next', async () => {
    const l = new Launcher(script, { env: process.env, execArgv }).start();
    try {
      await l.run(req('true', []));
      const first = l.pid!;
      const inFlight = l.run(req('sleep', ['30']));
      await new Promise((r) => setTimeout(r, 200));
      process.kill(first, 'SIGKILL');
      await expect(inFlight).rejects.toThrow(/process launcher exited/);
      expect((await l.run(req('echo', ['again']))).stdout).toBe('again\n');
      expect(l.pid).not.toBe(first);
    } finally {
      await l.close();
    }
  });

  it('ignores SIGINT and SIGTERM (the server’s process group) and ends when its parent closes it', async () => {
    const l = new Launcher(script, { env: process.env, execArgv }).start();
    await l.run(req('true', []));
    const pid = l.pid!;
    process.kill(pid, 'SIGINT');
    process.kill(pid, 'SIGTERM');
    expect((await l.run(req('echo', ['still']))).stdout).toBe('still\n');
    await l.close();
    expect(await gone(pid)).toBe(true);
    // Closed, it runs commands from this process.
    expect((await l.run(req('echo', ['here']))).stdout).toBe('here\n');
  });

  it('closes in a process that has nothing else to wait for: the close settles and the process exits 0', async () => {
    // A node's shutdown closes the launcher with nothing else left running, then closes its state db.
    const parentCode = `
      import { Launcher } from ${JSON.stringify(fileURLToPath(new URL('./launcher.ts', import.meta.url)))};
      const l = new Launcher(${JSON.stringify(script)}, { env: process.env, execArgv: ['--import', 'tsx'] }).start();
      await l.run({ command: 'true', args: [], env: process.env, stdio: 'collect' });
      await l.close();
      console.log('closed');`;
    const parent = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', parentCode], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    parent.stdout.on('data', (b: Buffer) => (out += b.toString()));
    const code = await new Promise<number | null>((resolve) => parent.once('exit', resolve));
    expect({ code, out }).toEqual({ code: 0, out: 'closed\n' });
  });

  it('ends when its parent is killed (-9), leaving no process behind', async () => {
    const parentCode = `
      import { Launcher } from ${JSON.stringify(fileURLToPath(new URL('./launcher.ts', import.meta.url)))};
      const l = new Launcher(${JSON.stringify(script)}, { env: process.env, execArgv: ['--import', 'tsx'] }).start();
      await l.run({ command: 'true', args: [], env: process.env, stdio: 'collect' });
      console.log(l.pid);
      setInterval(() => {}, 1000);`;
    const parent = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', parentCode], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const pid = await new Promise<number>((resolve) =>
      parent.stdout.once('data', (b: Buffer) => resolve(Number(b.toString().trim()))),
    );
    expect(alive(pid)).toBe(true);
    parent.kill('SIGKILL');
    expect(await gone(pid)).toBe(true);
  });
});
