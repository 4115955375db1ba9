import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const repoRoot = fileURLToPath(new URL('../../../../', import.meta.url));
const apiKeyModule = fileURLToPath(new URL('./api-key.ts', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'aenv-secret-race-'));
const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/**
 * A child that says "ready", waits (bounded) for the go file, then resolves the API key in `home`
 * and prints the result as JSON.
 */
function racer(
  home: string,
  go: string,
): { child: ChildProcess; ready: Promise<void>; result: Promise<string> } {
  const script = `
    import { existsSync } from 'node:fs';
    const { resolveApiKey } = await import(${JSON.stringify(apiKeyModule)});
    process.stdout.write('ready\\n');
    const nap = new Int32Array(new SharedArrayBuffer(4));
    for (let i = 0; i < 20000 && !existsSync(${JSON.stringify(go)}); i++) Atomics.wait(nap, 0, 0, 1);
    const r = resolveApiKey({ homePath: ${JSON.stringify(home)}, env: {}, externalPath: ${JSON.stringify(join(dir, 'none'))} });
    process.stdout.write(JSON.stringify(r) + '\\n');
  `;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: repoRoot,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  let err = '';
  let onReady: () => void;
  const ready = new Promise<void>((res) => (onReady = res));
  child.stdout!.on('data', (b: Buffer) => {
    out += b.toString();
    if (out.startsWith('ready\n')) onReady();
  });
  child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  const result = new Promise<string>((res, rej) =>
    child.on('close', (code) =>
      code === 0 ? res(out.slice('ready\n'.length).trim()) : rej(new Error(`racer failed: ${err}`)),
    ),
  );
  return { child, ready, result };
}

describe('managed secret creation across processes', () => {
  it('converges on one key when several servers generate it at once', async () => {
    const home = join(dir, 'home');
    const go = join(dir, 'go');
    const racers = Array.from({ length: 4 }, () => racer(home, go));
    await Promise.race([Promise.all(racers.map((r) => r.ready)), Promise.all(racers.map((r) => r.result))]);
    writeFileSync(go, '');
    const results = (await Promise.all(racers.map((r) => r.result))).map(
      (line) => JSON.parse(line) as { key: string; source: string },
    );
    expect(new Set(results.map((r) => r.key)).size).toBe(1);
    expect(results.filter((r) => r.source === 'generated')).toHaveLength(1);
    expect(readdirSync(join(home, 'secrets'))).toEqual(['api-key']);
  });
});
