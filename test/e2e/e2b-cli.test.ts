// E2B's own CLI (`@e2b/cli`, a dev dependency) pointed at aenv: E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY, a
// temporary HOME (no ~/.e2b/config.json). What cannot work against a self-hosted server: docs/differences.md.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox } from 'e2b';
import { REPO, runProgram, type Ran } from './harness.js';
import { deleteTemplatesNamed, describeNode } from './fixture.js';

const CLI = join(REPO, 'node_modules', '@e2b', 'cli', 'dist', 'index.js');
const BASE = 'oci:/var/cache/aenv/images/base:latest';
const RUN = `r${Date.now().toString(36)}`;

describe('the e2b CLI against aenv', () => {
  const { server } = describeNode({
    name: 'ecli',
    toml: '[observability.sandbox_metrics]\ninterval_secs = 1\n',
  });
  let home: string;

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'e2b-cli-home-'));
  });
  afterAll(async () => {
    await deleteTemplatesNamed(server, RUN);
    if (home) rmSync(home, { recursive: true, force: true });
  });

  /** Runs `e2b <args>` with stdin on /dev/null; resolves with its exit code and output (never rejects on a failure). */
  function e2b(...args: string[]): Promise<Ran> {
    return runProgram(CLI, args, {
      env: {
        HOME: home,
        E2B_API_URL: server.url,
        E2B_SANDBOX_URL: server.url,
        E2B_API_KEY: server.apiKey,
        NO_COLOR: '1',
        FORCE_COLOR: '0',
        CI: '1',
      },
    });
  }

  it('creates, lists, inspects, runs a command in, pauses, resumes and kills sandboxes', async () => {
    const created = await e2b('sandbox', 'create', '--detach', '--timeout', '300', 'base');
    expect(created.code, created.stderr).toBe(0);
    const id = created.stdout.trim().split('\n').at(-1)!;
    expect(id).toMatch(/^[0-9a-f-]{36}$/);

    const list = await e2b('sandbox', 'list', '--format', 'json');
    expect(list.code, list.stderr).toBe(0);
    const listed = JSON.parse(list.stdout) as { sandboxId: string; state: string; templateId: string }[];
    expect(listed.find((s) => s.sandboxId === id)).toMatchObject({ state: 'running' });

    const info = await e2b('sandbox', 'info', id, '--format', 'json');
    expect(info.code, info.stderr).toBe(0);
    expect(JSON.parse(info.stdout)).toMatchObject({ sandboxId: id, state: 'running', name: 'base' });
    const pretty = await e2b('sandbox', 'info', id);
    expect(pretty.stdout).toContain(`Sandbox ID: ${id}`);

    const ran = await e2b('sandbox', 'exec', id, '--', 'sh', '-c', 'echo from-cli; exit 3');
    expect(ran.code).toBe(3);
    expect(ran.stdout).toBe('from-cli\n');

    const paused = await e2b('sandbox', 'pause', id);
    expect(paused.stdout, paused.stderr).toContain('has been paused');
    const pausedList = JSON.parse(
      (await e2b('sandbox', 'list', '--state', 'paused', '--format', 'json')).stdout,
    ) as {
      sandboxId: string;
    }[];
    expect(pausedList.map((s) => s.sandboxId)).toContain(id);
    const resumed = await e2b('sandbox', 'resume', id);
    expect(resumed.stdout, resumed.stderr).toContain('has been resumed');

    const logs = await e2b('sandbox', 'logs', id, '--format', 'json');
    expect(logs.code, logs.stderr).toBe(0);
    const lines = logs.stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: string; logger: string; message: string; event?: string });
    expect(lines.filter((l) => l.logger === 'lifecycle').map((l) => l.event)).toEqual([
      'created',
      'paused',
      'resumed',
    ]);
    expect(
      lines.every((l) => ['debug', 'info', 'warn', 'error'].includes(l.level.trim().toLowerCase())),
    ).toBe(true);
    const prettyLogs = await e2b('sandbox', 'logs', id);
    expect(prettyLogs.stdout).toContain('sandbox created from template base');

    let metrics = { code: -1, stdout: '', stderr: '' };
    for (let i = 0; i < 60; i++) {
      metrics = await e2b('sandbox', 'metrics', id, '--format', 'json');
      if (metrics.stdout.includes('cpuCount')) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(metrics.code, metrics.stderr).toBe(0);
    const sample = JSON.parse(metrics.stdout.split('\n').find((l) => l.startsWith('{'))!) as Record<
      string,
      number
    >;
    expect(sample.memTotal).toBeGreaterThan(0);
    expect(sample.cpuCount).toBeGreaterThan(0);
    const prettyMetrics = await e2b('sandbox', 'metrics', id);
    expect(prettyMetrics.stdout).toMatch(/CPU: .*Memory: .*Disk: /);

    const snap = await e2b('sandbox', 'snapshot', 'create', id, '--name', `${RUN}-snap`);
    expect(snap.stdout, snap.stderr).toContain('Created snapshot');
    const snaps = JSON.parse((await e2b('sandbox', 'snapshot', 'list', '--format', 'json')).stdout) as {
      snapshotId: string;
      names: string[];
    }[];
    const mineSnap = snaps.find((x) => x.names.some((n) => n.includes(`${RUN}-snap`)));
    expect(mineSnap).toBeDefined();
    const delSnap = await e2b('sandbox', 'snapshot', 'delete', mineSnap!.snapshotId);
    expect(delSnap.stdout, delSnap.stderr).toContain('has been deleted');

    const killed = await e2b('sandbox', 'kill', id);
    expect(killed.stdout).toContain(`Sandbox ${id} has been killed`);
    const again = await e2b('sandbox', 'kill', id);
    expect(again.stderr).toContain(`Sandbox ${id} wasn't found`);
    const gone = await e2b('sandbox', 'info', id);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain("wasn't found");

    const [x, y] = await Promise.all([
      Sandbox.create({ timeoutMs: 300_000 }),
      Sandbox.create({ timeoutMs: 300_000 }),
    ]);
    const all = await e2b('sandbox', 'kill', '--all');
    expect(all.stdout).toContain('Killed 2 running sandboxes');
    expect(await x.isRunning()).toBe(false);
    expect(await y.isRunning()).toBe(false);
  });

  it('builds a template from a Dockerfile, lists, publishes, unpublishes and deletes it', async () => {
    const ctx = mkdtempSync(join(tmpdir(), 'e2b-cli-ctx-'));
    try {
      writeFileSync(join(ctx, 'e2b.Dockerfile'), `FROM ${BASE}\nRUN echo ${RUN} > /tmp/cli-built\n`);
      const name = `${RUN}-cli`;
      const built = await e2b(
        'template',
        'create',
        name,
        '--path',
        ctx,
        '--cpu-count',
        '1',
        '--memory-mb',
        '512',
      );
      expect(built.code, `${built.stdout}\n${built.stderr}`).toBe(0);
      expect(built.stdout).toContain('finished');
      const sbx = await Sandbox.create(name, { timeoutMs: 120_000 });
      expect((await sbx.commands.run('cat /tmp/cli-built')).stdout.trim()).toBe(RUN);
      await sbx.kill();

      const list = await e2b('template', 'list', '--format', 'json');
      expect(list.code, list.stderr).toBe(0);
      const templates = JSON.parse(list.stdout) as {
        templateID: string;
        aliases: string[];
        public: boolean;
      }[];
      const mine = templates.find((t) => t.aliases.includes(name))!;
      expect(mine).toBeDefined();
      expect(templates.some((t) => t.aliases.includes('base'))).toBe(true);
      expect((await e2b('template', 'list')).stdout).toContain(name);

      const unpub = await e2b('template', 'unpublish', mine.templateID, '--yes');
      expect(unpub.code, unpub.stderr).toBe(0);
      expect((await server.api('GET', `/templates/${mine.templateID}`)).body.public).toBe(false);
      const pub = await e2b('template', 'publish', mine.templateID, '--yes');
      expect(pub.stdout).toContain(`Published as: ${name}`);

      const del = await e2b('template', 'delete', name, '--yes');
      expect(del.code, del.stderr).toBe(0);
      expect((await server.api('GET', `/templates/${name}`)).status).toBe(404);
    } finally {
      rmSync(ctx, { recursive: true, force: true });
    }
  });

  it('says what needs E2B’s cloud: login is a browser flow, auth info reads only the local config', async () => {
    const info = await e2b('auth', 'info');
    expect(info.stdout).toContain('Not logged in');
    // The deprecated v1 build system is refused by the CLI itself, whatever the server.
    const v1 = await e2b('template', 'build');
    expect(v1.code).toBe(1);
    expect(v1.stdout).toContain('DEPRECATION WARNING');
  });
});
