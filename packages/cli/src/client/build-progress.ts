// Following a template build to its end (`aenv pull`, `aenv build`, `aenv template watch`): its log lines
// stream to stderr as they arrive under a live status (client/progress.ts), its end decides the exit code.
import type { AenvApiClient, TemplateBuildInfo } from '@aenv/protocol';
import { CliError } from './errors.js';
import type { Progress } from './progress.js';

export interface FollowOptions {
  /** Give up waiting after this long (the build goes on). */
  timeoutSecs?: number;
  pollMs?: number;
  /** What the status line calls the build (`template py`). */
  label?: string;
  /** How an error names the failed step (`step 3, Dockerfile line 9`); default `step 3`. */
  describeStep?: (step: string) => string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls the build's status until it is `ready` or `error`; an error build throws naming its reason. */
export async function followBuild(
  api: AenvApiClient,
  templateId: string,
  buildId: string,
  progress: Progress,
  opts: FollowOptions = {},
): Promise<TemplateBuildInfo> {
  const deadline = opts.timeoutSecs !== undefined ? Date.now() + opts.timeoutSecs * 1000 : Infinity;
  const label = opts.label ?? `template ${templateId}`;
  let offset = 0;
  let step = '';
  progress.start(`building ${label}`);
  try {
    for (;;) {
      const info = await api.templates.buildStatus(templateId, buildId, { logsOffset: offset });
      for (const e of info.logEntries) {
        progress.log(`${e.timestamp} ${e.step ? `[${e.step}] ` : ''}${e.message}`);
        if (e.step) step = e.step;
      }
      offset += info.logEntries.length;
      if (info.status === 'ready') {
        progress.stop({ ok: true, text: `${label} is ready` });
        return info;
      }
      if (info.status === 'error') {
        progress.stop({ ok: false, text: `${label} failed` });
        const step = info.reason?.step;
        const at = step ? ` (${opts.describeStep?.(step) ?? `step ${step}`})` : '';
        throw new CliError(
          'failure',
          `build ${buildId} of template ${templateId} failed${at}: ${info.reason?.message ?? 'no reason given'}`,
        );
      }
      progress.update(`building ${label}: ${info.status}${step ? `, step ${step}` : ''}`);
      // A full page of log lines: fetch the next at once.
      if (info.logEntries.length >= 100) continue;
      if (Date.now() >= deadline) {
        throw new CliError(
          'timedOut',
          `build ${buildId} of template ${templateId} is still ${info.status} after ${opts.timeoutSecs} s`,
          `it goes on: follow it with \`aenv template watch ${templateId}\``,
        );
      }
      await sleep(opts.pollMs ?? 1000);
    }
  } finally {
    progress.stop();
  }
}
