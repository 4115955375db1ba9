// Entry point of the envd bundle (<tools>/envd/envd.cjs), started and restarted by aenv-init.
// Must stay the first import: see wire/native-base64.ts.
import './wire/install-native-base64.js';
import { installLeanHeaders } from './http/lean-headers.js';
import { writeStderr } from './logger.js';
import { optionsFromEnv } from './options.js';
import { startEnvd } from './server.js';

async function main(): Promise<void> {
  // Whatever else writes to stdout/stderr (a dependency's warning) must not end envd when the disk is full.
  for (const stream of [process.stdout, process.stderr]) stream.on('error', () => {});
  installLeanHeaders();
  const opts = optionsFromEnv(process.env, __dirname);
  const envd = await startEnvd(opts);
  const stop = (signal: string) => {
    opts.logger.info('stopping', { signal });
    envd.processes.killAll();
    void envd.close().finally(() => process.exit(0));
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
}

main().catch((err: unknown) => {
  writeStderr(`envd: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exit(1);
});
