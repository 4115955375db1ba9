// Following a template build to its end (`aenv pull`, `aenv build`, `aenv template watch`): its log lines
// go to stderr as they arrive, its end decides the exit code.
import type { AenvApiClient, TemplateBuildInfo } from '@aenv/protocol';
import { CliError } from './errors.js';

export interface FollowOptions {
  quiet?: boolean;
  /** Give up waiting after this long (the build goes on). */
  timeoutSecs?: number;
  pollMs?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls the build's status until it is `ready` or `error`; an error build throws naming its reason. */
export async function followBuild(
  api: AenvApiClient,
  templateId: string,
  buildId: string,
  opts: FollowOptions = {},
): Promise<TemplateBuildInfo> {
  const deadline = opts.timeoutSecs !== undefined ? Date.now() + opts.timeoutSecs * 1000 : Infinity;
  let offset = 0;
  for (;;) {
    const info = await api.templates.buildStatus(templateId, buildId, { logsOffset: offset });
    for (const e of info.logEntries) {
      if (!opts.quiet) process.stderr.write(`${e.timestamp} ${e.step ? `[${e.step}] ` : ''}${e.message}\n`);
    }
    offset += info.logEntries.length;
    if (info.status === 'ready') return info;
    if (info.status === 'error') {
      const step = info.reason?.step ? ` (step ${info.reason.step})` : '';
      throw new CliError(
        'failure',
        `build ${buildId} of template ${templateId} failed${step}: ${info.reason?.message ?? 'no reason given'}`,
      );
    }
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
}
