#!/usr/bin/env node
import { CommanderError } from 'commander';
import { EXIT } from './client/exit-codes.js';
import { buildProgram } from './program.js';

try {
  await buildProgram().parseAsync(process.argv);
} catch (e) {
  // Commander has already printed its one line (unknown option, missing argument, …).
  if (!(e instanceof CommanderError)) throw e;
  process.exitCode = e.exitCode === 0 ? EXIT.ok : EXIT.usage;
}
