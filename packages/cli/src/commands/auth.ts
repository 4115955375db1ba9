// `aenv auth`: asks for the server URL and API key (or takes them from flags and stdin), checks them against
// the server, and saves them to the credentials file (0600 in a 0700 directory).
import type { Command } from 'commander';
import input from '@inquirer/input';
import password from '@inquirer/password';
import { AenvApiClient } from '@aenv/protocol';
import {
  DEFAULT_URL,
  checkUrl,
  credentialsPath,
  readCredentials,
  writeCredentials,
  type Credentials,
} from '../client/config.js';
import { CliError, classify, describeError, usageError } from '../client/errors.js';

interface AuthFlags {
  url?: string;
  apiKey?: string;
  verify: boolean;
  debug?: boolean;
}

async function firstLineOfStdin(): Promise<string> {
  let text = '';
  for await (const chunk of process.stdin) {
    text += String(chunk);
    if (text.includes('\n') || text.length > 64 * 1024) break;
  }
  return text.split('\n')[0]!.trim();
}

async function auth(f: AuthFlags): Promise<void> {
  const path = credentialsPath();
  const interactive = process.stdin.isTTY === true && process.stdout.isTTY === true;
  let saved: Credentials = {};
  try {
    saved = readCredentials(path) ?? {};
  } catch {
    // A broken or too-open file is replaced whole below.
  }
  const suggested = process.env.AENV_URL || saved.url || DEFAULT_URL;
  const url = checkUrl(
    f.url ?? (interactive ? await input({ message: 'aenv server URL', default: suggested }) : suggested),
    'server URL',
  );
  let apiKey = f.apiKey;
  if (apiKey === undefined) {
    apiKey = interactive ? await password({ message: 'API key', mask: '*' }) : await firstLineOfStdin();
  }
  apiKey = apiKey.trim();
  if (!apiKey)
    throw usageError('no API key given', 'type it at the prompt, pipe it on stdin, or pass --api-key');
  if (f.verify) {
    try {
      await new AenvApiClient({ baseUrl: url, apiKey }).sandboxes.list({ limit: 1 });
    } catch (e) {
      const c = classify(e);
      throw new CliError(c.kind, `not saved: ${c.message}`, c.hint, { cause: e });
    }
  }
  writeCredentials(path, { url, apiKey });
  process.stdout.write(`saved the credentials for ${url} to ${path}\n`);
}

export function registerAuthCommand(program: Command): void {
  program
    .command('auth')
    .description('save the server URL and API key (checked against the server first)')
    .option('--url <url>', `server URL (default: asked; ${DEFAULT_URL})`)
    .option('--api-key <key>', 'API key (default: asked, or the first line of stdin when piped)')
    .option('--no-verify', 'save without checking them against the server')
    .option('--debug', 'print stack traces with errors')
    .action(async (f: AuthFlags) => {
      try {
        await auth(f);
      } catch (e) {
        const d = describeError(e, f.debug === true);
        process.stderr.write(d.line + '\n');
        process.exitCode = d.exitCode;
      }
    });
}
