#!/usr/bin/env node
// Template benchmark (root): through a real `aenv server` (the e2e harness) and the e2b SDK,
//   - Template.build() of a small template: 3 RUN steps + a start command with a ready command, cold (a fresh
//     nonce in the first step: nothing from the layer cache) and rebuilt (same steps: every step cached);
//   - Sandbox.create() from that template (start process running) next to Sandbox.create() from `base`,
//     interleaved, and resume from disk of a paused sandbox of the same template (memory released at pause).
// Prints n / min / median / p95 in ms.
//
//   node scripts/bench/template-bench.mjs [--builds 5] [--creates 20] [--json] [--keep]
//
// Traffic stays on loopback. Templates and sandboxes it makes are deleted at the end, and then the node
// "tbench" itself (state dir, CoW volume, netns mounts, nft table, cgroups) unless --keep.
import { performance } from 'node:perf_hooks';
import { randomUUID } from 'node:crypto';
import { register } from 'tsx/esm/api';

register();
const { startServer } = await import('../../test/e2e/harness.ts');
const { Sandbox, Template } = await import('e2b');
const { removeNode } = await import('./lib/nodes.mjs');

const args = process.argv.slice(2);
const argValue = (name, def) => (args.includes(name) ? Number(args[args.indexOf(name) + 1]) : def);
const BUILDS = argValue('--builds', 5);
const CREATES = argValue('--creates', 20);
const asJson = args.includes('--json');
const keep = args.includes('--keep');
const BASE = 'oci:/var/cache/aenv/images/base:latest';
const log = (m) => console.error(`[template-bench ${new Date().toISOString().slice(11, 19)}] ${m}`);

function stats(samples) {
  const s = [...samples].sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)];
  return { n: s.length, min: s[0], median: q(0.5), p95: q(0.95) };
}

function small(nonce) {
  return Template()
    .fromImage(BASE)
    .runCmd(`echo ${nonce} > /tmp/nonce`)
    .runCmd('mkdir -p /tmp/app && date > /tmp/app/built')
    .runCmd('python3 -c "print(6 * 7)" > /tmp/app/answer')
    .setStartCmd("bash -c 'while :; do date +%s%N > /tmp/app/tick; sleep 1; done'", 'test -s /tmp/app/tick');
}

// Paused sandboxes release their memory at once: resume = restore from the checkpoint on disk.
const server = await startServer({ name: 'tbench', toml: '[orchestrator]\nresident_pause_grace_secs = 0\n' });
const sdk = { apiUrl: server.url, sandboxUrl: server.url, apiKey: server.apiKey, debug: false };
const templates = [];
const results = {};
try {
  log(`building ${BUILDS} templates cold and ${BUILDS} rebuilds from the cache`);
  const cold = [];
  const cached = [];
  for (let i = 0; i < BUILDS; i++) {
    const nonce = randomUUID();
    for (const [list, n] of /** @type {[number[], string][]} */ ([
      [cold, `tbench-${nonce.slice(0, 8)}`],
      [cached, `tbench-${nonce.slice(0, 8)}-again`],
    ])) {
      const t0 = performance.now();
      const info = await Template.build(small(nonce), n, { ...sdk });
      list.push(performance.now() - t0);
      templates.push(info.templateId);
    }
  }
  results['Template.build() cold (3 RUN + start/ready)'] = stats(cold);
  results['Template.build() rebuild, all steps cached'] = stats(cached);

  log(`creating ${CREATES} sandboxes from the template and ${CREATES} from base, interleaved`);
  const fromTemplate = [];
  const fromBase = [];
  let running = null;
  for (let i = 0; i < CREATES + 2; i++) {
    for (const which of i % 2 ? ['base', 'template'] : ['template', 'base']) {
      const t0 = performance.now();
      const sbx =
        which === 'template'
          ? await Sandbox.create(templates[0], { ...sdk, timeoutMs: 300_000 })
          : await Sandbox.create({ ...sdk, timeoutMs: 300_000 });
      const ms = performance.now() - t0;
      if (which === 'template' && running === null) {
        // "[t]" keeps the pattern from matching the pgrep command line itself.
        running = (await sbx.commands.run("pgrep -cf '[t]mp/app/tick' || true")).stdout.trim() !== '0';
      }
      await sbx.kill();
      if (i >= 2) (which === 'template' ? fromTemplate : fromBase).push(ms);
    }
  }
  results['Sandbox.create(template), start process running'] = stats(fromTemplate);
  results['Sandbox.create(base)'] = stats(fromBase);

  const resumes = [];
  let resumeNote = '';
  for (let i = 0; i < Math.min(CREATES, 10); i++) {
    const sbx = await Sandbox.create(templates[0], { ...sdk, timeoutMs: 300_000 });
    try {
      const paused = await server.api('POST', `/sandboxes/${sbx.sandboxId}/pause`);
      if (paused.status !== 204) {
        resumeNote = `pause answered ${paused.status}: ${paused.body?.message ?? ''}`;
        break;
      }
      const t0 = performance.now();
      await Sandbox.connect(sbx.sandboxId, { ...sdk, timeoutMs: 300_000 });
      resumes.push(performance.now() - t0);
    } finally {
      await Sandbox.kill(sbx.sandboxId, sdk).catch(() => {});
    }
  }
  if (resumes.length) results['resume from disk of a paused sandbox of the template'] = stats(resumes);

  if (asJson) console.log(JSON.stringify({ results, startProcessRunning: running, resumeNote }, null, 2));
  else {
    const f = (x) => x.toFixed(0).padStart(7);
    console.log(`${'operation'.padEnd(52)}    n     min  median     p95   (ms)`);
    for (const [op, s] of Object.entries(results)) {
      console.log(`${op.padEnd(52)} ${String(s.n).padStart(4)} ${f(s.min)} ${f(s.median)} ${f(s.p95)}`);
    }
    console.log(`start process running in sandboxes from the template: ${running}`);
    if (resumeNote) console.log(`resume not measured: ${resumeNote}`);
  }
} finally {
  for (const id of templates) await server.api('DELETE', `/templates/${id}`).catch(() => {});
  await server.stop();
  if (!keep) {
    const left = await removeNode('tbench');
    if (Object.values(left).some((v) => v.length)) log(`left on the host: ${JSON.stringify(left)}`);
  }
}
