import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, it } from 'vitest';

const pkg = fileURLToPath(new URL('..', import.meta.url));
const out = mkdtempSync('/tmp/aenv-protocol-gen-');
afterAll(() => rmSync(out, { recursive: true, force: true }));

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

it('the committed src/gen matches what `npm run gen` produces from proto/', () => {
  const buf = join(pkg, '..', '..', 'node_modules', '.bin', 'buf');
  const r = spawnSync(buf, ['generate', '-o', out], { cwd: pkg, encoding: 'utf8' });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  const generated = files(join(out, 'src', 'gen'))
    .map((f) => relative(join(out, 'src', 'gen'), f))
    .sort();
  const committed = files(join(pkg, 'src', 'gen'))
    .map((f) => relative(join(pkg, 'src', 'gen'), f))
    .sort();
  expect(generated).toEqual(committed);
  for (const f of generated) {
    expect(readFileSync(join(out, 'src', 'gen', f), 'utf8'), f).toBe(
      readFileSync(join(pkg, 'src', 'gen', f), 'utf8'),
    );
  }
});
