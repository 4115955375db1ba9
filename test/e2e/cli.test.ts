// The `aenv` client commands (docs/cli.md) run as the built binary against a real node: JSON output parsed,
// exit codes checked, the credentials file's rules, and the failures a user or a script meets.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, runProgram, type Ran } from './harness.js';
import { deleteTemplatesNamed, describeNode } from './fixture.js';
import { TestWebhookReceiver } from '../../packages/node/src/events/testing/webhook-receiver.js';

const CLI = join(REPO, 'packages', 'cli', 'dist', 'main.js');
const BASE_IMAGE = 'oci:/var/cache/aenv/images/base:latest';
const RUN = `c${Date.now().toString(36)}`;

describe('aenv CLI against a node', () => {
  const { server } = describeNode({
    name: 'cli',
    // Uploads of build files over 1 MiB are refused (the bad-Dockerfile test sends a bigger one).
    toml:
      '[observability.sandbox_metrics]\ninterval_secs = 1\n[template_build]\nmax_upload_mb = 1\n' +
      '[events.webhooks]\nallow_loopback = true\n',
  });
  let home: string;
  let work: string;
  const created: string[] = [];

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'aenv-cli-home-'));
    work = mkdtempSync(join(tmpdir(), 'aenv-cli-work-'));
  });
  afterAll(async () => {
    await deleteTemplatesNamed(server, RUN, '/v2/templates');
    for (const d of [home, work]) if (d) rmSync(d, { recursive: true, force: true });
  });

  /** Runs `aenv <args>` (stdin: `input`, or /dev/null); never rejects on a failing command. */
  function aenv(
    args: string[],
    opts: { env?: Record<string, string>; input?: string; auth?: boolean } = {},
  ): Promise<Ran> {
    return runProgram(CLI, args, {
      cwd: work,
      env: {
        HOME: home,
        ...(opts.auth === false ? {} : { AENV_URL: server.url, AENV_API_KEY: server.apiKey }),
        ...opts.env,
      },
      ...(opts.input !== undefined ? { input: opts.input } : {}),
      timeoutMs: 240_000,
    });
  }

  const json = (r: Ran) => {
    expect(r.code, `exit ${r.code}\n${r.stdout}\n${r.stderr}`).toBe(0);
    return JSON.parse(r.stdout);
  };

  async function startDetached(...extra: string[]): Promise<string> {
    const r = await aenv(['start', '-d', ...extra, 'base']);
    expect(r.code, r.stderr).toBe(0);
    const id = r.stdout.trim();
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    created.push(id);
    return id;
  }

  it('auth saves the credentials privately, checks them first, and the other commands use them', async () => {
    const file = join(home, '.config', 'aenv', 'credentials');
    // A wrong key is refused by the server: nothing is saved, the exit code says "auth".
    const bad = await aenv(['auth', '--url', server.url, '--api-key', 'wrong'], { auth: false });
    expect(bad.code, bad.stderr).toBe(7);
    expect(bad.stderr).toMatch(/^error: not saved: .*401/);
    expect(() => statSync(file)).toThrow();
    // The key from stdin (never on the command line when piped).
    const ok = await aenv(['auth', '--url', server.url], { auth: false, input: `${server.apiKey}\n` });
    expect(ok.code, ok.stderr).toBe(0);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(statSync(join(home, '.config', 'aenv')).mode & 0o777).toBe(0o700);
    expect(readFileSync(file, 'utf8')).toBe(`url = "${server.url}"\napi_key = "${server.apiKey}"\n`);
    expect(Array.isArray(json(await aenv(['list'], { auth: false })))).toBe(true);

    // Precedence: env over the file, flags over env; E2B_* when AENV_* are unset.
    const envWins = await aenv(['list'], { auth: false, env: { AENV_URL: 'http://127.0.0.1:1' } });
    expect(envWins.code).toBe(6);
    expect(envWins.stderr).toContain('no answer from the aenv API');
    json(await aenv(['list', '--url', server.url], { auth: false, env: { AENV_URL: 'http://127.0.0.1:1' } }));
    const keyFlag = await aenv(['list', '--api-key', 'nope'], { auth: false });
    expect(keyFlag.code).toBe(7);
    const e2bKey = await aenv(['list'], {
      auth: false,
      env: { E2B_API_KEY: 'nope', E2B_API_URL: server.url },
    });
    expect(e2bKey.code).toBe(7);
    const aenvOverE2b = await aenv(['list'], {
      auth: false,
      env: { AENV_API_KEY: server.apiKey, E2B_API_KEY: 'nope' },
    });
    expect(aenvOverE2b.code, aenvOverE2b.stderr).toBe(0);

    // A credentials file others can read is refused, naming the fix.
    chmodSync(file, 0o644);
    const open = await aenv(['list'], { auth: false });
    expect(open.code).toBe(7);
    expect(open.stderr).toContain(`run \`chmod 600 ${file}\``);
    // ... unless flags and env give everything (the file is not read then).
    json(await aenv(['list'], {}));
    chmodSync(file, 0o600);
    writeFileSync(file, 'url = "x"\ntoken = "y"\n', { mode: 0o600 });
    const unknownKey = await aenv(['list'], { auth: false });
    expect(unknownKey.code).toBe(2);
    expect(unknownKey.stderr).toContain('unknown keys: token');
    rmSync(file);
    const none = await aenv(['list'], { auth: false });
    expect(none.code).toBe(7);
    expect(none.stderr).toBe(
      'error: no API key configured; run `aenv auth`, or set AENV_API_KEY, or pass --api-key\n',
    );
  });

  it('starts, lists, execs, times out, pauses, resumes and deletes a sandbox', async () => {
    const id = await startDetached('--env', 'GREETING=hello', '--metadata', `run=${RUN}`);
    const listed = json(await aenv(['list', '--metadata', `run=${RUN}`])) as {
      sandboxID: string;
      state: string;
      alias?: string;
    }[];
    expect(listed).toEqual([expect.objectContaining({ sandboxID: id, state: 'running', alias: 'base' })]);
    const table = await aenv(['ls', '--output', 'table']);
    expect(table.stdout).toMatch(/ID\s+.*TEMPLATE\s+.*STATE/);
    expect(table.stdout).toContain(id);

    // stdout and stderr apart, the remote exit code, env, user, cwd, stdin.
    const r = await aenv(['exec', id, 'sh', '-c', 'echo out; echo err >&2; echo $GREETING; exit 3']);
    expect(r).toEqual({ code: 3, stdout: 'out\nhello\n', stderr: 'err\n' });
    const flags = await aenv([
      'exec',
      '--user',
      'root',
      '--cwd',
      '/tmp',
      '--env',
      'A=b c',
      id,
      'sh',
      '-c',
      'id -u; pwd; echo "$A"',
    ]);
    expect(flags).toEqual({ code: 0, stdout: '0\n/tmp\nb c\n', stderr: '' });
    const lsFlag = await aenv(['exec', id, 'ls', '-d', '/etc']);
    expect(lsFlag.stdout).toBe('/etc\n');
    const big = 'x'.repeat(200_000) + '\n';
    const cat = await aenv(['exec', id, 'wc', '-c'], { input: big });
    expect(cat.stdout.trim()).toBe(String(big.length));
    const timedOut = await aenv(['exec', '--timeout', '1', id, 'sleep', '30']);
    expect(timedOut.code).toBe(124);
    expect(timedOut.stderr).toContain('timed out after 1 s');
    const missing = await aenv(['exec', id, '/no/such/binary']);
    expect(missing.code).not.toBe(0);

    json(await aenv(['timeout', id, '900']));
    const detail = (await server.api('GET', `/sandboxes/${id}`)).body as { endAt: string };
    expect(Date.parse(detail.endAt) - Date.now()).toBeGreaterThan(800_000);

    expect(json(await aenv(['pause', id]))).toEqual({ sandboxID: id, state: 'paused' });
    expect(
      json(await aenv(['list', '--state', 'paused'])).map((s: { sandboxID: string }) => s.sandboxID),
    ).toContain(id);
    const onPaused = await aenv(['exec', id, 'true']);
    expect(onPaused.code).toBe(4);
    expect(onPaused.stderr).toBe(`error: sandbox ${id} is paused; resume it with \`aenv resume ${id}\`\n`);
    expect(json(await aenv(['resume', id]))).toMatchObject({ sandboxID: id, resumed: true });
    expect((await aenv(['exec', id, 'cat', '/proc/self/comm'])).stdout).toBe('cat\n');

    expect(json(await aenv(['rm', id]))).toEqual({ sandboxID: id, deleted: true });
    const again = await aenv(['delete', id]);
    expect(again.code).toBe(3);
    expect(again.stderr).toMatch(
      /^error: DELETE \/sandboxes\/.* failed \(HTTP 404\): .*not found; check the id/,
    );
  });

  it('uploads and downloads files and trees', async () => {
    const id = await startDetached();
    const src = join(work, 'src');
    mkdirSync(join(src, 'sub', 'deeper'), { recursive: true });
    writeFileSync(join(src, 'a.txt'), 'alpha\n');
    writeFileSync(join(src, 'sub', 'deeper', 'b.bin'), Buffer.alloc(300_000, 7));
    const up = json(await aenv(['upload', id, src, '/tmp/tree']));
    expect(up).toMatchObject({ files: 2, bytes: 300_006 });
    expect((await aenv(['exec', id, 'cat', '/tmp/tree/a.txt'])).stdout).toBe('alpha\n');
    const one = json(await aenv(['upload', id, join(src, 'a.txt'), '/tmp/']));
    expect(one.path).toBe('/tmp/a.txt');
    const relDir = await aenv(['upload', id, src, 'relative']);
    expect(relDir.code).toBe(2);

    const back = json(await aenv(['download', id, '/tmp/tree', join(work, 'back')]));
    expect(back).toMatchObject({ files: 2, bytes: 300_006 });
    expect(readFileSync(join(work, 'back', 'a.txt'), 'utf8')).toBe('alpha\n');
    expect(readFileSync(join(work, 'back', 'sub', 'deeper', 'b.bin')).equals(Buffer.alloc(300_000, 7))).toBe(
      true,
    );
    json(await aenv(['download', id, '/tmp/a.txt']));
    expect(readFileSync(join(work, 'a.txt'), 'utf8')).toBe('alpha\n');
    const exists = await aenv(['download', id, '/tmp/a.txt']);
    expect(exists.code).toBe(2);
    expect(exists.stderr).toContain('pass --force');
    json(await aenv(['download', '--force', id, '/etc/hostname', join(work, 'a.txt')]));
    const nothing = await aenv(['download', id, '/no/such/file']);
    expect(nothing.code).toBe(3);
    const noLocal = await aenv(['upload', id, join(work, 'nope'), '/tmp/x']);
    expect(noLocal.code).toBe(3);
  });

  it('snapshots, forks, shows logs and metrics, lists nodes', async () => {
    const id = await startDetached('--timeout', '600');
    const snap = json(await aenv(['snapshot', 'create', id, '--name', `${RUN}-snap`])) as {
      snapshotID: string;
    };
    const snaps = json(await aenv(['snap', 'ls', '--sandbox-id', id])) as {
      snapshotID: string;
      names: string[];
    }[];
    expect(snaps).toEqual([expect.objectContaining({ snapshotID: snap.snapshotID, names: [`${RUN}-snap`] })]);

    const forked = json(await aenv(['fork', id, '--count', '2'])) as { sandbox?: { sandboxID: string } }[];
    expect(forked).toHaveLength(2);
    for (const f of forked) {
      expect(f.sandbox?.sandboxID).toMatch(/^[0-9a-f-]{36}$/);
      created.push(f.sandbox!.sandboxID);
    }
    const badCount = await aenv(['fork', id, '--count', '0']);
    expect(badCount.code).toBe(2);

    const logs = json(await aenv(['logs', id])) as { message: string }[];
    expect(logs.length).toBeGreaterThan(0);
    const text = await aenv(['logs', id, '--output', 'table']);
    expect(text.stdout).toMatch(/INFO/);

    // Samples are taken every second on this node: wait for one (bounded).
    let samples: unknown[] = [];
    for (let i = 0; i < 30 && samples.length === 0; i++) {
      samples = json(await aenv(['metrics', id]));
      if (samples.length === 0) await new Promise((r) => setTimeout(r, 1000));
    }
    expect(samples[0]).toMatchObject({ cpuCount: expect.any(Number), memTotal: expect.any(Number) });

    const nodes = json(await aenv(['nodes'])) as { status: string }[];
    expect(nodes[0]?.status).toBe('ready');

    for (const f of forked) json(await aenv(['rm', f.sandbox!.sandboxID]));
    json(await aenv(['rm', id]));
    json(await aenv(['snapshot', 'delete', snap.snapshotID]));
  });

  it('manages webhooks: create, list, get, update, deliveries, rm; refuses bad flags', async () => {
    const receiver = await new TestWebhookReceiver('whsec-cli-0123').start();
    try {
      const secretFile = join(work, 'webhook-secret');
      writeFileSync(secretFile, `${receiver.secret}\n`, { mode: 0o600 });
      const w = json(
        await aenv([
          'webhook',
          'create',
          receiver.url,
          '--event',
          'created,killed',
          '--secret-file',
          secretFile,
          '--name',
          'cli',
        ]),
      ) as { id: string; url: string; events: string[]; enabled: boolean };
      expect(w).toMatchObject({
        url: receiver.url,
        events: ['sandbox.lifecycle.created', 'sandbox.lifecycle.killed'],
        enabled: true,
      });
      expect((json(await aenv(['webhook', 'ls'])) as { id: string }[]).map((x) => x.id)).toEqual([w.id]);
      expect(json(await aenv(['webhook', 'get', w.id]))).toMatchObject({ id: w.id, name: 'cli' });
      expect((await aenv(['webhook', 'ls', '--output', 'table'])).stdout).toContain('created,killed');

      const id = await startDetached('--timeout', '120');
      json(await aenv(['rm', id]));
      await receiver.waitFor((r) => r.length >= 2, 30_000);
      expect(receiver.received.every((d) => d.signatureValid && d.body.sandboxId === id)).toBe(true);
      const groups = json(await aenv(['webhook', 'deliveries', w.id])) as {
        sandboxId: string;
        attempts: unknown[];
      }[];
      expect(groups.map((g) => [g.sandboxId, g.attempts.length])).toEqual([
        [id, 1],
        [id, 1],
      ]);
      expect(json(await aenv(['webhook', 'deliveries', w.id, '--status', 'failed']))).toEqual([]);
      expect((await aenv(['webhook', 'deliveries', w.id, '--output', 'table'])).stdout).toMatch(
        /killed .*success/,
      );

      // The secret from stdin; only what is given changes.
      const off = json(
        await aenv(['webhook', 'update', w.id, '--disable', '--secret-file', '-'], {
          input: 'whsec-cli-new\n',
        }),
      );
      expect(off).toMatchObject({ id: w.id, enabled: false, url: receiver.url, name: 'cli' });

      const bad: [string[], number, RegExp][] = [
        [['webhook', 'update', w.id], 2, /nothing to change/],
        [
          ['webhook', 'create', receiver.url, '--event', 'bogus', '--secret-file', secretFile],
          2,
          /unknown event "bogus"/,
        ],
        [['webhook', 'create', receiver.url, '--event', 'created'], 2, /--secret-file/],
        [
          ['webhook', 'create', receiver.url, '--event', 'created', '--secret-file', join(work, 'nope')],
          2,
          /cannot read/,
        ],
        [
          ['webhook', 'create', 'ftp://x', '--event', 'created', '--secret-file', secretFile],
          2,
          /HTTP 400.*url/,
        ],
        [['webhook', 'get', 'not-a-uuid'], 3, /HTTP 404/],
        [['webhook', 'deliveries', w.id, '--limit', '0'], 2, /error: /],
      ];
      for (const [args, code, message] of bad) {
        const r = await aenv(args);
        expect({ args, code: r.code }).toEqual({ args, code });
        expect(r.stderr.split('\n').find((l) => l.startsWith('error: '))).toMatch(message);
      }
      expect(json(await aenv(['webhook', 'rm', w.id]))).toEqual({ id: w.id, deleted: true });
      expect((await aenv(['webhook', 'get', w.id])).code).toBe(3);
      expect(json(await aenv(['webhook', 'ls']))).toEqual([]);
    } finally {
      await receiver.close();
    }
  });

  it('pulls a template, lists, watches and deletes it', async () => {
    const name = `${RUN}-pulled`;
    const pulled = await aenv(['pull', BASE_IMAGE, '--name', name, '--cpu', '1', '--memory', '512']);
    expect(pulled.code, pulled.stderr).toBe(0);
    expect(JSON.parse(pulled.stdout)).toMatchObject({ name, status: 'ready' });
    const templates = json(await aenv(['template', 'list'])) as { names: string[]; cpuCount: number }[];
    expect(templates.find((t) => t.names.includes(name))).toMatchObject({ cpuCount: 1 });
    expect(json(await aenv(['template', 'watch', name, '--quiet']))).toMatchObject({ status: 'ready' });
    expect(json(await aenv(['templates', 'rm', name]))).toMatchObject({ deleted: true });
    expect((await aenv(['template', 'delete', name])).code).toBe(3);
    expect((await aenv(['pull', BASE_IMAGE, '--probe', '80', '--ready-cmd', 'true'])).code).toBe(2);
  });

  /** Writes a build context: `files` by relative path. */
  function context(name: string, files: Record<string, string>): string {
    const dir = join(work, name);
    for (const [rel, text] of Object.entries(files)) {
      mkdirSync(join(dir, rel, '..'), { recursive: true });
      writeFileSync(join(dir, rel), text);
    }
    return dir;
  }

  it('builds a template from a Dockerfile using every supported instruction; a sandbox of it shows each took effect', async () => {
    const name = `${RUN}-built`;
    const dir = context('ctx-ok', {
      Dockerfile: [
        'ARG FROM_NAME=base',
        'FROM ${FROM_NAME}',
        'ARG GREETING=hello',
        'ENV APP_HOME=/srv/app MODE=${GREETING}-mode',
        'USER root',
        'RUN mkdir -p "$APP_HOME" && echo "run saw $MODE" > "$APP_HOME/run.txt" && chown user "$APP_HOME"',
        'WORKDIR $APP_HOME',
        'COPY --chown=user conf/ ./conf/',
        'COPY app.txt /srv/app/app.txt',
        'USER user',
        'RUN id -un > whoami.txt',
        'ADD extra /opt/extra',
        'EXPOSE 8080',
        'VOLUME /srv/app/data',
        'LABEL team=rl',
        // Combined as Docker does: `sh -c '…' cmd`, so $0 is CMD's word.
        'ENTRYPOINT ["sh", "-c", "echo started-by-$0 > /tmp/started.txt; exec sleep infinity"]',
        'CMD ["cmd"]',
        'HEALTHCHECK --interval=1s CMD test -f /tmp/started.txt',
      ].join('\n'),
      '.dockerignore': 'conf/*.secret\n',
      // Unique to this run: its files hash is new to the node, so they are uploaded.
      'conf/a.conf': `key=${RUN}\n`,
      'conf/nested/b.conf': 'b\n',
      'conf/x.secret': 'never uploaded\n',
      'app.txt': 'from the context\n',
      'extra/e.txt': 'added\n',
    });
    // Detached: the files are uploaded and the build started, then `template watch` follows it (a build
    // that waits is followed the same way: the failing build below, and the terminal test).
    const started = await aenv(['build', '-d', '--name', name, '--build-arg', 'GREETING=howdy', dir]);
    expect(started.code, started.stderr).toBe(0);
    expect(JSON.parse(started.stdout)).toMatchObject({ name, status: 'building' });
    // Plain progress lines when stderr is not a terminal.
    expect(started.stderr).toMatch(/^uploading COPY conf \(4 entries, \d+ KiB\)$/m);
    const built = await aenv(['template', 'watch', name]);
    expect(built.code, built.stderr).toBe(0);
    expect(JSON.parse(built.stdout)).toMatchObject({ name, status: 'ready' });
    expect(built.stderr).toMatch(/^building template .*-built$/m);
    expect(built.stderr).toContain('RUN id -un > whoami.txt');

    const sbx = await aenv(['start', '-d', name]);
    expect(sbx.code, sbx.stderr).toBe(0);
    const sid = sbx.stdout.trim();
    created.push(sid);
    const sh = (cmd: string) => aenv(['exec', sid, 'sh', '-c', cmd]);
    expect(await sh('cat /srv/app/run.txt /srv/app/whoami.txt /srv/app/app.txt')).toEqual({
      code: 0,
      stdout: 'run saw howdy-mode\nuser\nfrom the context\n',
      stderr: '',
    });
    expect((await sh('echo "$MODE $APP_HOME $GREETING"; id -un; pwd')).stdout).toBe(
      'howdy-mode /srv/app howdy\nuser\n/srv/app\n',
    );
    expect(
      (await sh('cd /srv/app/conf && find . | sort; stat -c %U a.conf nested/b.conf; cat a.conf')).stdout,
    ).toBe(`.\n./a.conf\n./nested\n./nested/b.conf\nuser\nuser\nkey=${RUN}\n`);
    expect(
      (
        await sh(
          'cat /opt/extra/e.txt; stat -c %U /opt/extra/e.txt; cat /tmp/started.txt; pgrep -x sleep >/dev/null && echo running',
        )
      ).stdout,
    ).toBe('added\nroot\nstarted-by-cmd\nrunning\n');
    json(await aenv(['rm', sid]));
    expect(json(await aenv(['template', 'rm', name]))).toMatchObject({ deleted: true });
  });

  it('refuses bad Dockerfiles naming the line, before anything is created; a failing step fails the build', async () => {
    const cases: [string, Record<string, string>, number, RegExp][] = [
      [
        'unknown',
        { Dockerfile: 'FROM base\nRUN true\nFROBNICATE now' },
        2,
        /line 3: unknown instruction "FROBNICATE"/,
      ],
      [
        'multi',
        { Dockerfile: 'FROM base AS a\nRUN true\nFROM base' },
        2,
        /line 3: multi-stage Dockerfiles are not supported/,
      ],
      [
        'missing',
        { Dockerfile: 'FROM base\nCOPY nope.txt /tmp/' },
        3,
        /line 2: COPY nope.txt: no such file or directory/,
      ],
      [
        'escape',
        { Dockerfile: 'FROM base\n\nCOPY ../ctx-ok/app.txt /tmp/' },
        2,
        /line 3: COPY \.\.\/ctx-ok\/app.txt: the source is outside the build context/,
      ],
      [
        'ignored',
        { Dockerfile: 'FROM base\nCOPY x.log /tmp/', 'x.log': 'x', '.dockerignore': '*.log' },
        2,
        /line 2: COPY x.log: every file of it is excluded by .dockerignore/,
      ],
    ];
    for (const [label, files, code, message] of cases) {
      const r = await aenv(['build', '--name', `${RUN}-bad-${label}`, context(`ctx-${label}`, files)]);
      expect({ label, code: r.code }).toEqual({ label, code });
      expect(r.stderr).toMatch(new RegExp(`^error: Dockerfile ${message.source}`));
      expect(r.stderr.split('\n')).toHaveLength(2);
    }
    const big = context('ctx-big', { Dockerfile: 'FROM base\nCOPY big.bin /tmp/' });
    writeFileSync(join(big, 'big.bin'), randomBytes(2 * 1024 * 1024));
    const tooBig = await aenv(['build', '--name', `${RUN}-bad-big`, big]);
    expect(tooBig.code, tooBig.stderr).toBe(2);
    expect(tooBig.stderr).toMatch(
      /^error: Dockerfile line 2: COPY big.bin: the upload of the build files was refused \(HTTP 413\): .*; leave files out with .dockerignore$/m,
    );
    const noFile = await aenv(['build', '--name', `${RUN}-bad-nofile`, join(work, 'no-such-dir')]);
    expect(noFile.code).toBe(3);
    expect(noFile.stderr).toMatch(/^error: no Dockerfile at /);
    expect((await aenv(['build', context('ctx-noname', { Dockerfile: 'FROM base' })])).code).toBe(2);
    const names = (json(await aenv(['template', 'list'])) as { names: string[] }[]).flatMap((t) => t.names);
    expect(names.filter((n) => n.startsWith(`${RUN}-bad`))).toEqual([]);

    const failing = await aenv([
      'template',
      'build',
      '--name',
      `${RUN}-bad-run`,
      context('ctx-fail', { Dockerfile: 'FROM base\nRUN echo before-the-failure && exit 3' }),
    ]);
    expect(failing.code).toBe(1);
    expect(failing.stderr).toContain('before-the-failure');
    expect(failing.stderr).toMatch(
      /^error: build .* failed \(step 1, Dockerfile line 2\): failed to run command 'echo before-the-failure && exit 3': exit status 3$/m,
    );
  });

  it('refuses bad ids, flags and servers with one clear line and a distinct exit code', async () => {
    const cases: [string[], number, RegExp][] = [
      [['exec', 'not-a-uuid', 'true'], 3, /^error: GET \/sandboxes\/not-a-uuid failed \(HTTP 404\)/],
      [['pause', '../../etc'], 3, /HTTP 404/],
      [['timeout', '00000000-0000-0000-0000-000000000000', '-5'], 2, /error: /],
      [['start', '-d', 'no-such-template'], 3, /HTTP 404.*no-such-template/],
      [['start', '-d', '--cpu', '2', 'base'], 2, /--cold starts only/],
      [['start', '-d', '--cold', '--disk-size-mb', '1500', 'img'], 2, /error: /],
      [['start', 'base'], 2, /needs a terminal; use -d/],
      [['list', '--output', 'yaml'], 2, /error: option .*--output.* 'yaml' is invalid/],
      [['list', '--url', 'ftp://x'], 2, /not an http\(s\) URL/],
      [['list', '--url', 'http://127.0.0.1:1'], 6, /no answer from the aenv API/],
      [['nosuch'], 2, /unknown command 'nosuch'/],
      [['completion', 'tcsh'], 2, /invalid/],
    ];
    for (const [args, code, message] of cases) {
      const r = await aenv(args);
      expect({ args, code: r.code }).toEqual({ args, code });
      // Before it, at most the progress line of the operation (plain lines: stderr is not a terminal).
      expect(r.stderr.split('\n').find((l) => l.startsWith('error: '))).toMatch(message);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
    // --debug adds the stack.
    const debug = await aenv(['list', '--debug', '--url', 'http://127.0.0.1:1']);
    expect(debug.stderr).toMatch(/\n\s+at /);
    // A start that cannot attach left nothing behind.
    const all = json(await aenv(['list'])) as { sandboxID: string }[];
    expect(all.filter((s) => !created.includes(s.sandboxID))).toEqual([]);
  });

  describe('in a real terminal (tmux)', () => {
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const sessions: string[] = [];
    afterAll(() => {
      for (const name of sessions) spawnSync('tmux', ['kill-session', '-t', name]);
    });

    /**
     * Runs `aenv <args>` in a detached tmux session of 100x30; the wrapper prints the exit code and whether
     * the terminal settings (stty -g) were the same after as before, then waits to be killed.
     */
    function inTmux(args: string[]): string {
      const name = `${RUN}-${sessions.length}`;
      sessions.push(name);
      const wrapper = join(work, `${name}.sh`);
      writeFileSync(
        wrapper,
        [
          `export HOME=${home} AENV_URL=${server.url} AENV_API_KEY=${server.apiKey}`,
          // An interactive terminal, also under CI (where the spinner would otherwise stay off).
          'unset CI',
          'before=$(stty -g)',
          `${process.execPath} ${CLI} ${args.map((a) => `'${a}'`).join(' ')}`,
          'code=$?',
          '[ "$(stty -g)" = "$before" ] && state=RESTORED || state=BROKEN',
          'echo "AENV-EXIT:$code:$state"',
          'sleep 600',
        ].join('\n'),
      );
      const r = spawnSync('tmux', [
        'new-session',
        '-d',
        '-s',
        name,
        '-x',
        '100',
        '-y',
        '30',
        `bash --norc ${wrapper}`,
      ]);
      expect(r.status, String(r.stderr)).toBe(0);
      return name;
    }

    const pane = (name: string) =>
      spawnSync('tmux', ['capture-pane', '-p', '-J', '-t', name, '-S', '-200'], { encoding: 'utf8' }).stdout;

    /** Waits (bounded) until the pane shows `pattern`; returns the pane. */
    async function waitFor(name: string, pattern: RegExp): Promise<string> {
      for (let i = 0; i < 300; i++) {
        const text = pane(name);
        if (pattern.test(text)) return text;
        await sleep(200);
      }
      throw new Error(`tmux pane never showed ${pattern}:\n${pane(name)}`);
    }

    const keys = (name: string, ...k: string[]) => spawnSync('tmux', ['send-keys', '-t', name, ...k]);

    it('start attaches a shell: prompt, output, resize, exit restores the terminal', async () => {
      const t = inTmux(['start', 'base']);
      const shown = await waitFor(t, /sandbox [0-9a-f-]{36} \(exit the shell/);
      created.push(/sandbox ([0-9a-f-]{36})/.exec(shown)![1]!);
      // The login shell's prompt (`-J` keeps the pane's trailing spaces).
      await waitFor(t, /[#$] *$/m);
      keys(t, 'echo "hello-$((6*7))"', 'Enter');
      await waitFor(t, /^hello-42$/m);
      keys(t, 'stty size', 'Enter');
      await waitFor(t, /^30 100$/m);
      spawnSync('tmux', ['resize-window', '-t', t, '-x', '120', '-y', '40']);
      await sleep(500);
      keys(t, 'clear; stty size', 'Enter');
      await waitFor(t, /^40 120$/m);
      keys(t, 'exit 5', 'Enter');
      await waitFor(t, /AENV-EXIT:5:RESTORED/);
    });

    it('connect attaches to a running sandbox; Ctrl-D ends it; a dropped sandbox still restores the terminal', async () => {
      const id = await startDetached();
      const t = inTmux(['connect', id]);
      await sleep(1000);
      keys(t, 'echo "in-$((1+1))"', 'Enter');
      await waitFor(t, /^in-2$/m);
      keys(t, 'C-d');
      await waitFor(t, /AENV-EXIT:0:RESTORED/);

      const t2 = inTmux(['cn', id]);
      keys(t2, 'echo "again-$((2+1))"', 'Enter');
      await waitFor(t2, /^again-3$/m);
      json(await aenv(['rm', id]));
      const end = await waitFor(t2, /AENV-EXIT:\d+:\w+/);
      expect(end).toMatch(/AENV-EXIT:[1-9]\d*:RESTORED/);
    });

    it("exec -t runs in a PTY of the terminal's size and Ctrl-C interrupts it", async () => {
      const id = await startDetached();
      const t = inTmux([
        'exec',
        '-t',
        id,
        'sh',
        '-c',
        'stty size; trap "echo got-INT; exit 7" INT; sleep 300 & wait',
      ]);
      await waitFor(t, /^30 100$/m);
      keys(t, 'C-c');
      await waitFor(t, /got-INT/);
      await waitFor(t, /AENV-EXIT:7:RESTORED/);
    });
    it('shows a live progress line on a terminal: build log lines above it, then ✔', async () => {
      // --image stands in for FROM (which names nothing that exists).
      // The run's id in the step keeps it out of the node's step cache (a cached step logs no output).
      const dir = context('ctx-tty', {
        Dockerfile: `FROM no-such/image:0\nRUN echo "log-line-$((40+2))-${RUN}"`,
      });
      const t = inTmux(['build', '--name', `${RUN}-tty`, '--image', BASE_IMAGE, dir]);
      const shown = await waitFor(t, /AENV-EXIT:\d+:\w+/);
      expect(shown).toMatch(/AENV-EXIT:0:RESTORED/);
      expect(shown).toContain(`log-line-42-${RUN}`);
      expect(shown).toMatch(/✔ template .*-tty is ready \(\d+s\)/);
      expect(shown).toContain(`template ${RUN}-tty (`);
      // The spinner's frames were replaced in place: no leftover status lines between the log lines.
      expect(shown).not.toMatch(/building template .*-tty \d+s/);

      const id = await startDetached();
      const p = inTmux(['pause', id]);
      const paused = await waitFor(p, /AENV-EXIT:\d+:\w+/);
      expect(paused).toMatch(/✔ pausing [0-9a-f-]{36} \(\d+s\)\npaused [0-9a-f-]{36}\nAENV-EXIT:0:RESTORED/);
      json(await aenv(['rm', id]));
    });

    it('exec -t --timeout ends the command at the timeout with exit code 124', async () => {
      const id = await startDetached();
      const t = inTmux(['exec', '-t', '--timeout', '2', id, 'sh', '-c', 'echo waiting; sleep 300']);
      await waitFor(t, /^waiting/m);
      const end = await waitFor(t, /AENV-EXIT:\d+:\w+/);
      expect(end).toMatch(/error: the command timed out after 2 s\s*\nAENV-EXIT:124:RESTORED/);
      expect((await aenv(['exec', id, 'sh', '-c', 'pgrep -x sleep || echo none'])).stdout).toBe('none\n');
      json(await aenv(['rm', id]));
    });
  });

  it('prints completion scripts bash can load and complete with', async () => {
    const script = (await aenv(['completion', 'bash'])).stdout;
    const out = await new Promise<string>((resolve, reject) => {
      const b = spawn('bash', [
        '-c',
        `${script}\nCOMP_WORDS=(aenv snap c); COMP_CWORD=2; _aenv; echo "\${COMPREPLY[@]}"; COMP_WORDS=(aenv st); COMP_CWORD=1; _aenv; echo "\${COMPREPLY[@]}"`,
      ]);
      let o = '';
      b.stdout.on('data', (d: Buffer) => (o += d.toString()));
      b.on('error', reject);
      b.on('close', () => resolve(o));
    });
    expect(out).toBe('create\nstart\n');
    for (const shell of ['zsh', 'fish']) {
      const r = await aenv(['completion', shell]);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain('aenv');
    }
  });
});
