// The per-module benchmarks that already exist, run as child processes (they need no aenv server):
// runtime (driver vs raw runc/CRIU), network (slot manager vs raw ip/nft), image (pull vs skopeo+umoci),
// envd (SDK exec through envd vs a raw spawn in the same namespace). Their output is passed through and,
// where they offer --json, kept in the results.
import { spawn } from 'node:child_process';
import { fileURLToPath, URL } from 'node:url';

const REPO = fileURLToPath(new URL('../../../../', import.meta.url));

const COMMANDS = {
  runtime: (o) => [
    'node',
    ['scripts/bench/runtime-bench.mjs', '--json', '--n', String(o.createN), '--cr-n', String(o.crN)],
  ],
  network: (o) => ['node', ['scripts/bench/network-bench.mjs', '--json', '--n', String(o.createN)]],
  image: (o) => ['node', ['scripts/bench/image-bench.mjs', '--json', '--n', String(Math.min(o.createN, 5))]],
  envd: (o) => [
    'npx',
    ['tsx', 'packages/envd/scripts/bench-envd.mts', '--n', String(o.execN), '--rounds', '1'],
  ],
};

function runChild(cmd, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: REPO, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (b) => (out += b));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0
        ? resolve(out)
        : reject(new Error(`${cmd} ${args.join(' ')} exited with ${code}:\n${out.slice(-2000)}`)),
    );
  });
}

/** The JSON document a --json benchmark prints last (it may print progress before it). */
function lastJson(text) {
  const start = text.search(/^\{/m);
  if (start < 0) return null;
  try {
    return JSON.parse(text.slice(start));
  } catch {
    return null;
  }
}

export async function componentSuite(ctx, name) {
  const [cmd, args] = COMMANDS[name](ctx.opts);
  console.log(`\n== component benchmark: ${name} (${cmd} ${args.join(' ')})`);
  const out = await runChild(cmd, args);
  const json = lastJson(out);
  console.log(json ? JSON.stringify(json, null, 2) : out.trim());
  ctx.report.extra[name] = json ?? out;
  const rows = json ? summaryRows(json) : [];
  for (const r of rows) ctx.report.add({ suite: name, ...r });
  if (rows.length === 0)
    ctx.report.add({
      suite: name,
      op: 'ran; its output is printed above (and kept in --json under extra)',
      aenv: null,
    });
}

const isSummary = (x) =>
  x && typeof x === 'object' && ['n', 'min', 'median', 'p95'].every((k) => typeof x[k] === 'number');

/** Table rows from a component benchmark's JSON: {op: {driver, raw}} pairs and plain {op: summary} entries. */
function summaryRows(json) {
  const rows = [];
  for (const [op, v] of Object.entries(json)) {
    if (v && isSummary(v.driver))
      rows.push({
        op,
        aenv: v.driver,
        ...(isSummary(v.raw) ? { baseline: 'raw (same script)', raw: v.raw } : {}),
      });
    else if (isSummary(v)) rows.push({ op, aenv: v });
  }
  return rows;
}
