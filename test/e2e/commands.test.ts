// Commands and PTYs through the real e2b SDK against a real server (runc sandboxes from `base`).
import { beforeAll, describe, expect, it } from 'vitest';
import { CommandExitError, Sandbox, TimeoutError, type CommandHandle } from 'e2b';
import { eventually } from './harness.js';
import { describeNode } from './fixture.js';

describe('commands and PTY through the e2b SDK', () => {
  describeNode({ name: 'cmds' });
  let sbx: Sandbox;

  beforeAll(async () => {
    sbx = await Sandbox.create('base', {
      timeoutMs: 300_000,
      metadata: { suite: 'cmds', purpose: 'shared' },
      envs: { GLOBAL_VAR: 'from-create', SHADOWED: 'global' },
    });
  });

  it('creates from the named template with metadata and envVars', async () => {
    const info = await sbx.getInfo();
    expect(info.metadata).toEqual({ suite: 'cmds', purpose: 'shared' });
    expect(info.name).toBe('base');
    const r = await sbx.commands.run('echo "$GLOBAL_VAR $SHADOWED $E2B_SANDBOX $E2B_SANDBOX_ID"');
    expect(r.stdout).toBe(`from-create global true ${sbx.sandboxId}\n`);
  });

  it('separates stdout and stderr and reports exit codes', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const r = await sbx.commands.run('echo to-out; echo to-err >&2; printf partial', {
      onStdout: (d) => void out.push(d),
      onStderr: (d) => void err.push(d),
    });
    expect(r).toMatchObject({ exitCode: 0, stdout: 'to-out\npartial', stderr: 'to-err\n' });
    expect(out.join('')).toBe('to-out\npartial');
    expect(err.join('')).toBe('to-err\n');

    const failed = await sbx.commands.run('echo before; echo oops >&2; exit 7').catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(CommandExitError);
    const e = failed as CommandExitError;
    expect(e.exitCode).toBe(7);
    expect(e.stdout).toBe('before\n');
    expect(e.stderr).toBe('oops\n');
    expect(e.error).toMatch(/exit status 7/);
  });

  it('honours cwd, per-call envs that do not leak, and a missing cwd is an error', async () => {
    const r = await sbx.commands.run('pwd; echo "$CALL_VAR/$SHADOWED"', {
      cwd: '/tmp',
      envs: { CALL_VAR: 'call', SHADOWED: 'per-call' },
    });
    expect(r.stdout).toBe('/tmp\ncall/per-call\n');
    const later = await sbx.commands.run('echo "[${CALL_VAR:-unset}] $SHADOWED"; pwd');
    expect(later.stdout).toBe('[unset] global\n/home/user\n');
    await expect(sbx.commands.run('true', { cwd: '/no/such/dir' })).rejects.toThrow(/no\/such\/dir/);
  });

  it('runs as user by default and as root on request; user has passwordless sudo', async () => {
    const asUser = await sbx.commands.run('id -un; id -u; id -g; echo $HOME');
    expect(asUser.stdout).toBe('user\n1000\n1000\n/home/user\n');
    // The working directory stays the template's default workdir (as on E2B); HOME follows the user.
    const asRoot = await sbx.commands.run('id -un; id -u; echo $HOME', { user: 'root' });
    expect(asRoot.stdout).toBe('root\n0\n/root\n');
    const sudo = await sbx.commands.run('sudo -n id -u && sudo -n -E env | grep -c ^PATH=');
    expect(sudo.stdout.split('\n')[0]).toBe('0');
    await expect(sbx.commands.run('true', { user: 'nobody-here' as 'user' })).rejects.toThrow(/nobody-here/);
  });

  it('kills a command at timeoutMs with TimeoutError', async () => {
    const err = await sbx.commands.run('sleep 30', { timeoutMs: 1_500 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    // envd killed the process with the deadline: no `sleep 30` is left.
    await eventually(
      async () => !(await sbx.commands.run('ps -eo args', { user: 'root' })).stdout.includes('sleep 30'),
      'the timed-out process to be gone',
      100,
      100,
    );
  });

  it('runs in the background, lists, reconnects by pid, waits and kills', async () => {
    const handle = await sbx.commands.run('echo started; sleep 120', { background: true, timeoutMs: 0 });
    expect(handle.pid).toBeGreaterThan(1);
    await eventually(() => handle.stdout.includes('started'), 'background output');
    // The pid is the real pid inside the sandbox.
    await sbx.commands.run(`kill -0 ${handle.pid}`);

    const listed = await sbx.commands.list();
    const mine = listed.find((p) => p.pid === handle.pid);
    expect(mine).toBeDefined();
    expect(mine!.cmd).toBe('/bin/bash');
    expect(mine!.args).toEqual(['-l', '-c', 'echo started; sleep 120']);

    await handle.disconnect();
    // Disconnecting does not kill the process.
    await sbx.commands.run(`kill -0 ${handle.pid}`);

    const again = await sbx.commands.connect(handle.pid, { timeoutMs: 0 });
    expect(again.pid).toBe(handle.pid);
    expect(await sbx.commands.kill(handle.pid)).toBe(true);
    const ended = await again.wait().catch((e: unknown) => e);
    expect(ended).toBeInstanceOf(CommandExitError);
    expect((ended as CommandExitError).exitCode).toBe(-1);
    expect((ended as CommandExitError).error).toMatch(/signal: killed/);
    expect(await sbx.commands.kill(handle.pid)).toBe(false);
    expect((await sbx.commands.list()).some((p) => p.pid === handle.pid)).toBe(false);

    const short = await sbx.commands.run('sleep 0.2; echo done; exit 3', { background: true });
    const res = await short.wait().catch((e: unknown) => e as CommandExitError);
    expect(res.exitCode).toBe(3);
    expect(res.stdout).toBe('done\n');
  });

  it('feeds stdin with sendStdin and closes it with closeStdin', async () => {
    const handle: CommandHandle = await sbx.commands.run('cat; echo "<eof>"', {
      background: true,
      stdin: true,
    });
    await handle.sendStdin('line one\n');
    await sbx.commands.sendStdin(handle.pid, new TextEncoder().encode('line two\n'));
    await eventually(() => handle.stdout.includes('line two'), 'echoed stdin');
    await handle.closeStdin();
    const r = await handle.wait();
    expect(r.stdout).toBe('line one\nline two\n<eof>\n');

    // Without stdin: true, the process reads /dev/null and finishes at once.
    expect((await sbx.commands.run('cat; echo ok')).stdout).toBe('ok\n');
  });

  it('creates a PTY, takes input, resizes and kills it', async () => {
    let output = '';
    const decoder = new TextDecoder();
    const pty = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (d) => void (output += decoder.decode(d)),
      timeoutMs: 0,
    });
    const send = (s: string) => sbx.pty.sendInput(pty.pid, new TextEncoder().encode(s));
    await send('stty size; tty; echo "term=$TERM"\n');
    await eventually(
      () => /24 80/.test(output) && /term=xterm-256color/.test(output),
      'initial size',
      200,
      50,
    );
    expect(output).toMatch(/\/dev\/pts\/\d+/);

    await sbx.pty.resize(pty.pid, { cols: 132, rows: 50 });
    await send('stty size\n');
    await eventually(() => /50 132/.test(output), 'resized size', 200, 50);

    expect((await sbx.commands.list()).some((p) => p.pid === pty.pid)).toBe(true);
    expect(await sbx.pty.kill(pty.pid)).toBe(true);
    const end = await pty.wait().catch((e: unknown) => e);
    expect((end as CommandExitError).exitCode).toBe(-1);
    expect(await sbx.pty.kill(pty.pid)).toBe(false);
  });

  it('creates the default template with Sandbox.create() and reports a default timeout', async () => {
    const other = await Sandbox.create({ timeoutMs: 60_000 });
    try {
      const info = await other.getInfo();
      expect(info.templateId).toBe((await sbx.getInfo()).templateId);
      const ttl = info.endAt.getTime() - info.startedAt.getTime();
      expect(ttl).toBeGreaterThanOrEqual(59_000);
      expect(ttl).toBeLessThanOrEqual(70_000);
      expect((await other.commands.run('hostname')).stdout.trim()).toBe(other.sandboxId);
      // The first sandbox's env is not in the second one.
      expect((await other.commands.run('echo "[${GLOBAL_VAR:-}]"')).stdout).toBe('[]\n');
    } finally {
      await other.kill();
    }
  });
});
