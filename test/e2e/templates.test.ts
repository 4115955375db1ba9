// Templates built with the e2b SDK's Template() builder, then used: a sandbox from a template sees its files,
// environment, workdir and user, and its start command running; templates chain with fromTemplate.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox, Template, waitForFile, type LogEntry } from 'e2b';
import { deleteTemplatesNamed, describeNode } from './fixture.js';

const BASE = 'oci:/var/cache/aenv/images/base:latest';
const RUN = `r${Date.now().toString(36)}`;
const name = (n: string) => `${RUN}-${n}`;

describe('templates built with the SDK', () => {
  const { server } = describeNode({ name: 'tmpl' });
  let ctx: string;
  const sandboxes: Sandbox[] = [];

  beforeAll(async () => {
    ctx = mkdtempSync(join(tmpdir(), 'tmpl-ctx-'));
    writeFileSync(join(ctx, 'hello.txt'), `hello ${RUN}\n`);
    mkdirSync(join(ctx, 'tree', 'sub'), { recursive: true });
    writeFileSync(join(ctx, 'tree', 'a.txt'), 'a\n');
    writeFileSync(join(ctx, 'tree', '.hidden'), 'h\n');
    writeFileSync(join(ctx, 'tree', 'sub', 'b.txt'), 'b\n');
    // The start command: a process with a nonce of its own in its environment, which it also writes to a file,
    // unless the file exists already (a second start would leave the first one's nonce there).
    writeFileSync(
      join(ctx, 'serve.sh'),
      [
        '#!/bin/sh',
        'nonce=$(cat /proc/sys/kernel/random/uuid)',
        '[ -e /tmp/started ] || echo "up $GREETING $nonce" > /tmp/started',
        'NONCE=$nonce exec sleep 100000',
        '',
      ].join('\n'),
    );
    chmodSync(join(ctx, 'serve.sh'), 0o700);
  });

  afterAll(async () => {
    for (const s of sandboxes) await s.kill().catch(() => {});
    await deleteTemplatesNamed(server, RUN);
    if (ctx) rmSync(ctx, { recursive: true, force: true });
  });

  async function run(sbx: Sandbox, cmd: string, user?: 'root'): Promise<string> {
    const r = await sbx.commands.run(cmd, user ? { user } : {});
    return r.stdout.trim();
  }

  it('builds run/env/workdir/user/copy steps with a start command, and a sandbox from it sees all of it', async () => {
    const logs: LogEntry[] = [];
    const t = Template({ fileContextPath: ctx })
      .fromImage(BASE)
      .runCmd(`mkdir -p /srv && echo ${RUN} > /srv/marker`, { user: 'root' })
      .runCmd('id -un > /tmp/default-user')
      .setEnvs({ GREETING: 'hello', DERIVED: '$GREETING-world' })
      .setWorkdir('/app')
      .copy('hello.txt', '/app/')
      .copy('tree', '/opt/tree', { mode: 0o640 })
      .copy('serve.sh', '/usr/local/bin/serve', { user: 'root', mode: 0o755 })
      .setUser('alice')
      .runCmd('echo "$GREETING from $(id -un) in $(pwd)" > ~/notes.txt')
      .setStartCmd('/usr/local/bin/serve', waitForFile('/tmp/started'));
    const built = await Template.build(t, name('full'), {
      cpuCount: 1,
      memoryMB: 512,
      onBuildLogs: (e) => logs.push(e),
    });
    const messages = logs.map((e) => e.message);
    expect(messages).toContain('[1/9] RUN mkdir -p /srv && echo ' + RUN + ' > /srv/marker');
    expect(messages).toContain('created user alice');
    expect(messages.some((m) => /^template .* is ready/.test(m))).toBe(true);

    const sbx = await Sandbox.create(name('full'), { timeoutMs: 120_000 });
    sandboxes.push(sbx);
    const info = await sbx.getInfo();
    expect(info.templateId).toBe(built.templateId);
    expect(info.name).toBe(name('full'));
    expect(await run(sbx, 'cat /srv/marker')).toBe(RUN);
    expect(await run(sbx, 'cat /tmp/default-user')).toBe('user');
    expect(await run(sbx, 'echo "$GREETING|$DERIVED"')).toBe('hello|hello-world');
    expect(await run(sbx, 'pwd')).toBe('/app');
    expect(await run(sbx, 'id -un')).toBe('alice');
    expect(await run(sbx, 'cat /app/hello.txt')).toBe(`hello ${RUN}`);
    expect(await run(sbx, 'cat /home/alice/notes.txt')).toBe('hello from alice in /app');
    const tree = '/opt/tree /opt/tree/a.txt /opt/tree/.hidden /opt/tree/sub /opt/tree/sub/b.txt';
    expect(await run(sbx, `stat -c "%U %a %n" ${tree}`, 'root')).toBe(
      [
        'user 750 /opt/tree',
        'user 640 /opt/tree/a.txt',
        'user 640 /opt/tree/.hidden',
        'user 750 /opt/tree/sub',
        'user 640 /opt/tree/sub/b.txt',
      ].join('\n'),
    );
    expect(await run(sbx, 'stat -c "%U %a" /usr/local/bin/serve')).toBe('root 755');
    // The start process is running, and it is the one started during the build (restored from the template's
    // memory snapshot), not a second start: its nonce is the one it wrote then.
    expect(await run(sbx, 'pgrep -u alice -x sleep | wc -l')).toBe('1');
    const started = await run(sbx, 'cat /tmp/started');
    expect(started).toMatch(/^up hello [0-9a-f-]{36}$/);
    const nonceOf = (s: Sandbox) =>
      run(s, 'tr "\\0" "\\n" < /proc/$(pgrep -u alice -x sleep)/environ | grep "^NONCE="');
    expect(await nonceOf(sbx)).toBe(`NONCE=${started.split(' ')[2]}`);
    // Per-sandbox files are the sandbox's own, not the build sandbox's.
    expect(await run(sbx, 'cat /etc/hostname')).toBe(sbx.sandboxId);

    const envOverride = await Sandbox.create(name('full'), {
      timeoutMs: 60_000,
      envs: { GREETING: 'override' },
    });
    sandboxes.push(envOverride);
    expect(await run(envOverride, 'echo "$GREETING|$DERIVED"')).toBe('override|hello-world');
    // The same captured process, with the environment it had at build time.
    expect(await nonceOf(envOverride)).toBe(`NONCE=${started.split(' ')[2]}`);

    const refused = await server.api('DELETE', `/templates/${name('full')}`);
    expect(refused.status).toBe(409);
    expect(refused.body.message).toMatch(/used by 2 sandboxes/);
  });

  it('chains templates with fromTemplate: files, env, user and start command carry over', async () => {
    const t = Template()
      .fromTemplate(name('full'))
      .runCmd('echo more > /tmp/more; echo "$GREETING" >> /tmp/more')
      .setEnvs({ EXTRA: 'x' });
    await Template.build(t, name('child'));
    const sbx = await Sandbox.create(name('child'), { timeoutMs: 60_000 });
    sandboxes.push(sbx);
    expect(await run(sbx, 'cat /srv/marker')).toBe(RUN);
    expect(await run(sbx, 'cat /tmp/more')).toBe('more\nhello');
    expect(await run(sbx, 'echo "$GREETING $EXTRA"; id -un; pwd')).toBe('hello x\nalice\n/app');
    expect(await run(sbx, 'cat /tmp/started')).toMatch(/^up hello /);
    expect(await run(sbx, 'pgrep -u alice -x sleep | wc -l')).toBe('1');

    const parent = await server.api('GET', `/templates/${name('full')}`);
    const child = await server.api('GET', `/templates/${name('child')}`);
    expect(child.body.builds[0].status).toBe('ready');
    expect(parent.body.builds[0].status).toBe('ready');
  });

  it('builds from an image with no start command, and rebuilds from the cache to the same layer', async () => {
    const t = () => Template().fromImage(BASE).runCmd(`echo ${RUN}-plain > /tmp/plain`).setWorkdir('/tmp');
    await Template.build(t(), name('plain1'));
    const logs: string[] = [];
    await Template.build(t(), name('plain2'), { onBuildLogs: (e) => logs.push(e.message) });
    expect(logs).toContain('cache: reused the result of 2 of 2 steps');
    for (const n of ['plain1', 'plain2']) {
      const sbx = await Sandbox.create(name(n), { timeoutMs: 60_000 });
      sandboxes.push(sbx);
      expect(await run(sbx, 'cat plain; id -un')).toBe(`${RUN}-plain\nuser`);
    }
  });
});
