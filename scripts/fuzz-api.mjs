#!/usr/bin/env node
// A longer fuzzing run of a real node's API than `npm test` does (docs/security.md, "Fuzzing the API"): runs
// test/security/request-fuzz.test.ts with more cases per route family (control plane, upload links, data plane
// by headers and by host), bounded by a case count and a time limit per family.
//
//   node scripts/fuzz-api.mjs [--runs N] [--seconds S] [--seed N]
//
// Defaults: 5000 cases and at most 300 s per family (about 20 minutes at most in all). --seed replays the run
// a failure report names. Needs root and a build (`npm run build`), like the e2e tests; traffic stays on
// loopback. On a machine shared with other test runs, run it under the same lock as they use.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const value = (flag, fallback) => {
  const i = args.indexOf(flag);
  if (i < 0) return fallback;
  const v = Number(args[i + 1]);
  if (!Number.isSafeInteger(v) || v < 0) {
    console.error(`${flag} needs a non-negative integer`);
    process.exit(2);
  }
  return v;
};
for (const a of args) {
  if (a.startsWith('--') && !['--runs', '--seconds', '--seed'].includes(a)) {
    console.error(
      `unknown option ${a}\nusage: node scripts/fuzz-api.mjs [--runs N] [--seconds S] [--seed N]`,
    );
    process.exit(2);
  }
}
const runs = value('--runs', 5000);
const seconds = value('--seconds', 300);
const seed = value('--seed', undefined);

const env = {
  ...process.env,
  AENV_FUZZ_RUNS: String(runs),
  AENV_FUZZ_SECONDS: String(seconds),
  ...(seed !== undefined ? { AENV_FUZZ_SEED: String(seed) } : {}),
};
console.log(
  `fuzzing: ${runs} cases per route family, at most ${seconds} s each${seed !== undefined ? `, seed ${seed}` : ''}`,
);
const r = spawnSync(
  'npx',
  [
    'vitest',
    'run',
    '--project',
    'security',
    `--testTimeout=${(seconds + 120) * 1000}`,
    'test/security/request-fuzz.test.ts',
  ],
  { cwd: repo, env, stdio: 'inherit' },
);
process.exit(r.status ?? 1);
