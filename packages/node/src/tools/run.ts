import { spawn } from 'node:child_process';

/** Runs a host tool without a shell; rejects with its stderr when it fails. */
export function run(cmd: string, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.on('error', (e) => reject(new Error(`${cmd}: ${e.message}`)));
    child.on('close', (code) => {
      if (code === 0) resolve(Buffer.concat(out).toString());
      else
        reject(
          new Error(
            `${[cmd, ...args].join(' ')} exited with ${code}: ${Buffer.concat(err).toString().trim()}`,
          ),
        );
    });
  });
}
