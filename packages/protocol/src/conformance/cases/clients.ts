// The node's own envd clients (`@aenv/protocol` clients/envd) against a real envd: /health polling, /init with
// init keys, and the RPC client the template builder runs steps with.
import { Readable } from 'node:stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { EnvdRestError, initEnvd, uploadFile, waitForEnvd } from '../../clients/envd/rest.js';
import { EnvdCommandError, EnvdRpcClient } from '../../clients/envd/rpc.js';
import { Code } from '@connectrpc/connect';
import { InitBodyError } from '../../envd/init.js';
import { envdFetch, lacks, q, sh } from '../helpers.js';
import { CLIENTS } from '../profiles.js';
import type { ConformanceTarget, TargetSandbox } from '../target.js';

export function clientCases(target: ConformanceTarget): void {
  describe.skipIf(lacks(target.features, 'envd-init'))('envd clients of the node', () => {
    let sbx: TargetSandbox;
    let host: string;
    let port: number;
    const KEY = 'k'.repeat(64);
    const TOKEN = 'client-token';
    beforeAll(async () => {
      sbx = await target.sandbox(CLIENTS);
      const u = new URL(sbx.url);
      host = u.hostname;
      port = Number(u.port);
    });
    const envs = async (token?: string) =>
      (await (
        await envdFetch(sbx, '/envs', { headers: token ? { 'x-access-token': token } : {} })
      ).json()) as Record<string, string>;

    it('waits for /health, and gives up on an envd that does not answer', async () => {
      await waitForEnvd(host, port, { pollMs: 20, timeoutMs: 5_000 });
      await expect(waitForEnvd(host, 1, { pollMs: 20, timeoutMs: 200 })).rejects.toThrow(
        /envd at .*:1 not healthy after 200 ms/,
      );
      let asked = 0;
      await expect(
        waitForEnvd(host, 1, { pollMs: 1, timeoutMs: 60_000, isAlive: () => (asked++, false) }),
      ).rejects.toThrow(/sandbox init exited before envd became healthy/);
      expect(asked).toBe(1);
    });

    it('runs /init with the init key it set, and refuses a body envd would refuse without sending it', async () => {
      await initEnvd(
        host,
        port,
        { envVars: { STEP: '1' }, initKey: KEY, accessToken: TOKEN },
        { initKey: '' },
      );
      expect((await envs(TOKEN)).STEP).toBe('1');
      const refused = await initEnvd(host, port, { envVars: { STEP: '2' } }, { initKey: 'wrong' }).catch(
        (e: unknown) => e,
      );
      expect(refused).toBeInstanceOf(EnvdRestError);
      expect((refused as EnvdRestError).status).toBe(401);
      await expect(
        initEnvd(host, port, { envVars: { 'A=B': 'x' } }, { initKey: KEY }),
      ).rejects.toBeInstanceOf(InitBodyError);
      await initEnvd(host, port, { envVars: { STEP: '3' }, accessToken: TOKEN }, { initKey: KEY });
      expect((await envs(TOKEN)).STEP).toBe('3');
      expect((await envs(TOKEN))['A=B']).toBeUndefined();
    });

    it('runs commands to their end and in the background, with the token only', async () => {
      const envd = new EnvdRpcClient({ baseUrl: sbx.url, headers: sbx.routing, accessToken: TOKEN });
      const out = await envd.output({ cmd: '/bin/sh', args: ['-c', 'echo out; echo err >&2; exit 3'] });
      expect(out).toMatchObject({ exitCode: 3, status: 'exit status 3', stdout: 'out\n', stderr: 'err\n' });
      const chunks: string[] = [];
      const done = await envd.run(
        { cmd: '/bin/sh', args: ['-c', 'echo "$V" in "$PWD"'], envs: { V: 'v' }, cwd: '/tmp' },
        { onOutput: ({ stream, data }) => void chunks.push(`${stream}:${data.toString()}`) },
      );
      expect(done.exitCode).toBe(0);
      expect(chunks.join('')).toBe('stdout:v in /tmp\n');
      const bounded = await envd.output(
        { cmd: '/bin/sh', args: ['-c', 'head -c 300000 /dev/zero'] },
        { maxBytes: 1 },
      );
      expect(bounded.stdout.length).toBeLessThan(300_000);
      expect(bounded.stdout.length).toBeGreaterThan(0);

      const bg = await envd.startBackground({ cmd: 'sleep', args: ['30'] });
      expect(bg.pid).toBeGreaterThan(1);
      await envd.sendSignal(bg.pid, 'SIGTERM');
      expect(await bg.ended).toMatchObject({ exitCode: -1, status: 'signal: terminated' });

      expect(await envd.run({ cmd: '/no/such/binary', args: [] })).toMatchObject({ exitCode: 127 });
      const anonymous = new EnvdRpcClient({ baseUrl: sbx.url, headers: sbx.routing });
      const refused = await anonymous.run({ cmd: 'true', args: [] }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(EnvdCommandError);
      expect((refused as EnvdCommandError).code).toBe(Code.Unauthenticated);
    });

    it('makes directories, stats paths and uploads files', async () => {
      const envd = new EnvdRpcClient({ baseUrl: sbx.url, headers: sbx.routing, accessToken: TOKEN });
      const dir = `${sbx.workdir}/made/deep`;
      const made = await envd.makeDir(dir);
      expect(made.path).toBe(dir);
      expect((await envd.makeDir(dir)).path).toBe(dir);
      expect(await envd.stat(`${sbx.workdir}/made/none`)).toBeUndefined();
      const data = Buffer.from('uploaded by the node');
      await envd.uploadFile(`${dir}/f.txt`, Readable.from([data]), data.length, 'root');
      expect((await envd.output({ cmd: 'cat', args: [`${dir}/f.txt`] })).stdout).toBe('uploaded by the node');
      const onDir = await uploadFile(
        sbx.url,
        { path: dir, user: 'root', accessToken: TOKEN, headers: sbx.routing },
        Readable.from([data]),
        data.length,
      ).catch((e: unknown) => e);
      expect(onDir).toBeInstanceOf(EnvdRestError);
      expect((onDir as EnvdRestError).status).toBe(400);
      await sh({ ...sbx, accessToken: TOKEN }, `rm -r ${q(`${sbx.workdir}/made`)}`);
    });
  });
}
