// The Python SDK (the e2b that test/python/requirements.txt pins, in the venv test/services/python-sdk.sh makes)
// against one aenv node: pytest runs test/python/ once, pointed at the node the way a user points the SDK at a
// self-hosted server (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY), and every pytest case is reported here as a
// test of its own, failing with pytest's own report of it.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerHubMirrorToml } from './docker-hub-mirror.js';
import { REPO, endNode, startServer, type TestServer } from './harness.js';

const PYTHON = process.env.AENV_TEST_PYTHON ?? '/var/lib/aenv-test/pyvenv/bin/python';
const TESTS = join(REPO, 'test', 'python');
/** Bound on the whole pytest run; it is killed after that. */
const PYTEST_LIMIT_MS = 420_000;

interface CaseResult {
  outcome: 'passed' | 'failed' | 'skipped';
  text: string;
  seconds: number;
}

const pythonEnv = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = { ...process.env, PYTHONDONTWRITEBYTECODE: '1', ...extra };
  delete env.E2B_DEBUG;
  return env;
};

/** The pytest node ids under test/python, or why there are none. */
function collect(): { ids: string[]; problem?: string } {
  if (!existsSync(PYTHON))
    return { ids: [], problem: `${PYTHON} is missing: test/services/start.sh makes it (python-sdk.sh)` };
  const r = spawnSync(PYTHON, ['-m', 'pytest', '--collect-only', '-q'], {
    cwd: TESTS,
    encoding: 'utf8',
    timeout: 60_000,
    env: pythonEnv(),
  });
  const ids = (r.stdout ?? '').split('\n').filter((l) => l.includes('::'));
  if (r.status !== 0 || ids.length === 0)
    return { ids, problem: `pytest could not collect ${TESTS} (exit ${r.status}):\n${r.stdout}${r.stderr}` };
  return { ids };
}

const collected = collect();

describe('the Python SDK against aenv', () => {
  let server: TestServer;
  let dir: string;
  let results: Record<string, CaseResult> = {};
  let output = '';
  let exit: number | string | null = null;

  beforeAll(async () => {
    if (collected.problem) return;
    server = await startServer({
      name: 'sdkpy1',
      toml: `${dockerHubMirrorToml()}[observability.sandbox_metrics]\ninterval_secs = 1\n`,
    });
    dir = mkdtempSync(join(tmpdir(), 'aenv-pytest-'));
    const report = join(dir, 'report.json');
    const child = spawn(PYTHON, ['-m', 'pytest', '-q', '-rfE', '--durations=5'], {
      cwd: TESTS,
      detached: true, // its own process group, so a stuck run is killed whole
      stdio: ['ignore', 'pipe', 'pipe'],
      env: pythonEnv({
        E2B_API_URL: server.url,
        E2B_SANDBOX_URL: server.url,
        E2B_API_KEY: server.apiKey,
        AENV_PYTEST_REPORT: report,
      }),
    });
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const limit = setTimeout(() => {
      output += `\n[pytest killed after ${PYTEST_LIMIT_MS} ms]\n`;
      process.kill(-child.pid!, 'SIGKILL');
    }, PYTEST_LIMIT_MS);
    exit = await new Promise<number | string | null>((resolve) =>
      child.on('exit', (code, signal) => resolve(code ?? signal)),
    );
    clearTimeout(limit);
    if (existsSync(report)) results = JSON.parse(readFileSync(report, 'utf8')) as Record<string, CaseResult>;
    console.log(`pytest (${PYTHON}) exited ${exit}:\n${output.split('\n').slice(-25).join('\n')}`);
  }, PYTEST_LIMIT_MS + 120_000);

  afterAll(async () => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    if (server) expect(await endNode(server)).toEqual({ stray: [], exitCode: 0 });
  });

  if (collected.problem) {
    it('collects the Python SDK tests', () => {
      throw new Error(collected.problem);
    });
    return;
  }

  for (const id of collected.ids) {
    it(id, (ctx) => {
      const r = results[id];
      if (!r) throw new Error(`pytest reported nothing for ${id} (exit ${exit}); its output:\n${output}`);
      if (r.outcome === 'skipped') ctx.skip(r.text);
      if (r.outcome === 'failed') throw new Error(`${id} failed in pytest:\n${r.text}`);
      expect(r.outcome).toBe('passed');
    });
  }

  it('pytest ran every collected case and exited 0', () => {
    expect(Object.keys(results).sort()).toEqual([...collected.ids].sort());
    expect(exit, output).toBe(0);
  });
});
