// Attack class "hostile API callers (build API)", docs/security.md: a build cannot run forever or fill the disk
// and memory with its log. A real `aenv server` with a short build deadline and small log caps.
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { endNode, eventually, startServer, strayHostObjects, type TestServer } from '../e2e/harness.js';

const BASE = 'oci:/var/cache/aenv/images/base:latest';
const RUN = `r${Date.now().toString(36)}`;
const DEADLINE_SECS = 20;

interface StatusBody {
  status: 'waiting' | 'building' | 'ready' | 'error';
  logEntries: { level: string; message: string }[];
  reason?: { message: string; step?: string };
}

describe('build deadline and log caps (simg2)', () => {
  let server: TestServer;
  let n = 0;

  beforeAll(async () => {
    server = await startServer({
      name: 'simg2',
      toml: [
        '[template_build]',
        `max_build_secs = ${DEADLINE_SECS}`,
        'max_log_lines = 500',
        'max_log_mb = 1',
      ].join('\n'),
    });
  });

  afterAll(async () => {
    if (!server) return;
    const list = await server.api('GET', '/templates');
    for (const t of (list.body ?? []) as { templateID: string; names: string[] }[])
      if (t.names.some((x) => x.startsWith(RUN))) await server.api('DELETE', `/templates/${t.templateID}`);
    expect(await endNode(server)).toEqual({ stray: [], exitCode: 0 });
  });

  async function build(cmd: string): Promise<{ id: string; done: StatusBody }> {
    const created = await server.api('POST', '/v3/templates', { name: `${RUN}-${n++}`, cpuCount: 1 });
    const id = created.body.templateID as string;
    const r = await server.api('POST', `/v2/templates/${id}/builds/${id}`, {
      fromImage: BASE,
      // The run id keeps the node's layer cache (kept in its home across runs) from answering instead.
      steps: [{ type: 'RUN', args: [`: ${RUN}; ${cmd}`] }],
    });
    expect(r.status).toBe(202);
    for (let i = 0; i < 900; i++) {
      const s = await server.api('GET', `/templates/${id}/builds/${id}/status`);
      if (s.body.status === 'ready' || s.body.status === 'error') {
        return { id, done: { ...(s.body as StatusBody), logEntries: await allEntries(id) } };
      }
      await new Promise((res) => setTimeout(res, 200));
    }
    throw new Error(`build ${id} did not finish`);
  }

  /** Every log entry of a finished build (the status endpoint pages them 100 at a time). */
  async function allEntries(id: string): Promise<StatusBody['logEntries']> {
    const out: StatusBody['logEntries'] = [];
    for (let page = 0; page < 40; page++) {
      const s = await server.api(
        'GET',
        `/templates/${id}/builds/${id}/status?logsOffset=${out.length}&limit=100`,
      );
      const entries = (s.body as StatusBody).logEntries;
      out.push(...entries);
      if (entries.length < 100) return out;
    }
    throw new Error(`the log of ${id} has more than 40 pages`);
  }

  it('a build past max_build_secs ends error with the reason, and its sandbox is removed', async () => {
    const { done } = await build('echo started; sleep 100000');
    expect(done.status).toBe('error');
    expect(done.reason!.message).toBe(
      `the build exceeded its deadline of ${DEADLINE_SECS} s (template_build.max_build_secs)`,
    );
    expect(done.logEntries.map((e) => e.message)).toContain('started');
    // The status is recorded first; the build sandbox is removed right after.
    await eventually(async () => (await strayHostObjects(server)).length === 0, 'the build sandbox removed');
  });

  it('command output stops at max_log_lines, the log says so, and the build still ends ready', async () => {
    const { id, done } = await build('seq 1 20000');
    expect(done.status).toBe('ready');
    const messages = done.logEntries.map((e) => e.message);
    expect(messages.filter((m) => /^\d+$/.test(m)).length).toBeLessThan(500);
    expect(messages.filter((m) => m.startsWith('build log truncated'))).toEqual([
      'build log truncated: it reached 500 entries (template_build.max_log_lines); further command output is dropped',
    ]);
    expect(messages.some((m) => /template .* is ready/.test(m))).toBe(true);
    expect(messages.at(-1)).toMatch(/^\d+ log lines were dropped/);
    expect(readFileSync(join(server.home, 'builds', `${id}.log`), 'utf8').split('\n').length).toBeLessThan(
      600,
    );
  });

  it('command output stops at max_log_mb: long lines cannot fill the disk', async () => {
    // 4 MB of 8000-byte lines.
    const { id, done } = await build("head -c 4000000 /dev/zero | tr '\\0' x | fold -w 8000");
    expect(done.status).toBe('ready');
    expect(done.logEntries.map((e) => e.message)).toContain(
      'build log truncated: it reached 1 MiB (template_build.max_log_mb); further command output is dropped',
    );
    expect(statSync(join(server.home, 'builds', `${id}.log`)).size).toBeLessThan(1.2 * 1024 * 1024);
  });
});
