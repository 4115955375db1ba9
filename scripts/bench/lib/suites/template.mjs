// Templates: the SDK's Template.build() of a small template (3 RUN steps + a start command with a ready
// command) and Sandbox.create() from it (its start process already running), next to Sandbox.create()
// from `base` and to resume-from-disk of an idle paused sandbox measured by the pause suite in this run.
import { performance } from 'node:perf_hooks';
import { randomUUID } from 'node:crypto';
import { Sandbox, Template } from 'e2b';
import { isUnavailableAnswer, sleep } from '../api.mjs';
import { describe, NOT_AVAILABLE } from '../report.mjs';
import { traceLabel } from '../trace.mjs';

// On disk (not /tmp), readable by every user: RUN steps and the start command write here.
const DIR = '/var/tmp/aenv-bench';
const TICK = `${DIR}/tick`;
// Matches the start command's shell but not the shell running pgrep (its command line holds "[w]hile").
const START_PGREP = "pgrep -f '[w]hile :; do date'";
const RUN_OUTPUT = `${DIR}/answer`;
const GAP_MS = 300;

function smallTemplate(nonce) {
  return Template()
    .fromTemplate('base')
    .runCmd(`mkdir -p ${DIR} && chmod 1777 ${DIR} && echo ${nonce} > ${DIR}/nonce`)
    .runCmd(`date > ${DIR}/built`)
    .runCmd(`python3 -c "print(6 * 7)" > ${RUN_OUTPUT}`)
    .setStartCmd(`bash -c 'while :; do date +%s%N > ${TICK}; sleep 1; done'`, `test -s ${TICK}`);
}

/** SDK errors for a route that is not built yet look like this (the SDK wraps the API's answer). */
function looksUnavailable(e) {
  return /route not found|\b501\b|not implemented/i.test(describe(e));
}

export async function templateSuite(ctx) {
  const { report, opts } = ctx;
  const main = await ctx.mainNode();
  const buildOp = 'Template.build() (3 RUN steps + start cmd)';
  const createOp = 'Sandbox.create(template) → usable, start process running';

  const listed = await main.server.api('GET', '/v2/templates');
  if (isUnavailableAnswer(listed)) {
    const reason = `GET /v2/templates answers ${listed.status}`;
    report.notMeasured({ suite: 'template', op: buildOp, reason });
    report.notMeasured({ suite: 'template', op: createOp, reason });
    return;
  }

  const builds = [];
  const built = [];
  let buildError = null;
  for (let i = 0; i < opts.templateN && !buildError; i++) {
    const name = `aenv-bench-${randomUUID().slice(0, 8)}`;
    const t0 = performance.now();
    try {
      // A fresh nonce in the first step: nothing may come from the build cache.
      const info = await Template.build(smallTemplate(randomUUID()), name, { ...main.sdk, skipCache: true });
      builds.push(performance.now() - t0);
      built.push(info.templateId ?? name);
    } catch (e) {
      buildError = e;
    }
  }
  const sandboxes = [];
  try {
    if (builds.length === 0) {
      const status = looksUnavailable(buildError) ? NOT_AVAILABLE : 'failed';
      report.notMeasured({ suite: 'template', op: buildOp, status, reason: describe(buildError) });
      report.notMeasured({ suite: 'template', op: createOp, status, reason: 'no template was built' });
      return;
    }
    report.add({
      suite: 'template',
      op: buildOp,
      unit: 'ms',
      aenv: builds,
      note: `${buildError ? `a later build failed (${describe(buildError)}); ` : ''}from \`base\`, skipCache; includes the ready command's polling and the template snapshot.`,
    });

    const fromTemplate = [];
    const fromBase = [];
    let startProcessRunning = null;
    let runOutputPresent = null;
    const template = built[0];
    for (let i = 0; i < opts.createN + 2; i++) {
      const keep = i >= 2;
      for (const which of i % 2 ? ['base', 'template'] : ['template', 'base']) {
        // The template's launches and base's boots each have their phases (a median of both describes neither).
        traceLabel(which === 'template' ? 'template launch' : 'base boot');
        const t0 = performance.now();
        const sbx =
          which === 'template'
            ? await Sandbox.create(template, { ...main.sdk, timeoutMs: 600_000 })
            : await Sandbox.create({ ...main.sdk, timeoutMs: 600_000 });
        const ms = performance.now() - t0;
        traceLabel('');
        sandboxes.push(sbx);
        if (which === 'template' && startProcessRunning === null) {
          const ok = (cmd) =>
            sbx.commands.run(cmd).then(
              () => true,
              () => false,
            );
          startProcessRunning = await ok(START_PGREP);
          runOutputPresent = await ok(`test "$(cat ${RUN_OUTPUT})" = 42`);
        }
        await sbx.kill();
        if (keep) (which === 'template' ? fromTemplate : fromBase).push(ms);
      }
      await sleep(GAP_MS);
    }
    const check =
      `in a sandbox created from the template, the start process was ${startProcessRunning ? '' : 'NOT '}running` +
      ` and the RUN steps' files were ${runOutputPresent ? '' : 'NOT '}there`;
    const fromDisk = ctx.shared.resumeFromDiskIdle;
    if (fromDisk?.length) {
      report.add({
        suite: 'template',
        op: createOp,
        aenv: fromTemplate,
        baseline: 'resume from disk, idle sandbox (pause suite, same run)',
        raw: fromDisk,
        note: check,
      });
    } else {
      report.add({
        suite: 'template',
        op: createOp,
        aenv: fromTemplate,
        note: `${check}; resume from disk not measured in this run (pause suite not run or not available yet)`,
      });
    }
    report.add({
      suite: 'template',
      op: createOp,
      aenv: fromTemplate,
      baseline: 'Sandbox.create() from base (same run)',
      raw: fromBase,
    });
  } finally {
    for (const sbx of sandboxes) await sbx.kill().catch(() => {});
    for (const id of built) await main.server.api('DELETE', `/templates/${id}`).catch(() => {});
  }
}
