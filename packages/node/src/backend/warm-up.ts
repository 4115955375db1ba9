// What a pre-started sandbox does while it waits in the warm pool: one call down each path a new sandbox's first
// requests take through envd (a command as the SDK runs it, a file read), so that envd's first-use compilation of
// those paths and the command's first page faults are paid by the pool, not by the first command of the create
// that takes the sandbox (measured: the first `commands.run` of a hand-out took ≈ 25 ms more than the next).
import { Writable } from 'node:stream';
import { AGENTENV_MOUNT, EnvdRpcClient } from '@aenv/protocol';

/** Bound on the whole warm-up: a template whose login shell hangs must not hold a pool slot. */
const WARM_UP_LIMIT_MS = 10_000;

/**
 * The file read: one that is the same in every sandbox of a node. envd closes a downloaded file a moment
 * after the answer ends, so a start capture's checkpoint may catch it open, and CRIU restores an open file
 * only where it finds it with the same size (`/etc/hostname`, written per sandbox, made such captures fail).
 */
const WARM_UP_FILE = `${AGENTENV_MOUNT}/VERSION`;

/**
 * Runs `bash -l -c true` and reads a file of the tools mount as `user` through the envd at `host:port`. Best effort: an
 * image without bash or the file still warms most of the path; the error says what failed.
 */
export async function warmUpEnvd(host: string, port: number, user: string): Promise<void> {
  const envd = new EnvdRpcClient({ baseUrl: `http://${host}:${port}`, json: true });
  const signal = AbortSignal.timeout(WARM_UP_LIMIT_MS);
  await envd.run({ cmd: '/bin/bash', args: ['-l', '-c', 'true'], user }, { signal });
  const discard = new Writable({ write: (_chunk, _enc, done) => done() });
  await envd.downloadFile(WARM_UP_FILE, discard, user, WARM_UP_LIMIT_MS);
}
