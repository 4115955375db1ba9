// The conformance suite's `envd` target: standalone envd processes started the way the envd tests always
// started them. A profile that is not isolated gets the envd bundle run as root on this host (default workdir a
// temporary directory); an isolated one gets aenv-init → envd as PID 1 of a namespace chrooted into the test
// rootfs, with `user` as its default user.
import { mkdtempSync, rmSync } from 'node:fs';
import type { ConformanceTarget, Feature, SandboxProfile, TargetSandbox } from '@aenv/protocol/conformance';
import { buildTestRootfs } from './rootfs.js';
import { buildTestTools } from './tools.js';
import { startHostEnvd, startSandboxEnvd, type RunningTestEnvd } from './envd-process.js';
import { initEnvd, sdkSandbox } from './sdk.js';

const FEATURES: ReadonlySet<Feature> = new Set<Feature>([
  'envd-init',
  'envd-auth',
  'h2c',
  'bare-urls',
  'test-rootfs',
]);
/** The access token of secure profiles. */
const TOKEN = 'secret-token-123';
/** What an isolated envd is told it runs in. */
const IDS = { sandboxId: 'isbx1', templateId: 'tmplbase' };

export interface EnvdTarget extends ConformanceTarget {
  /** Stops every envd it started and removes their directories. */
  close(): Promise<void>;
}

export function envdTarget(): EnvdTarget {
  const dirs: string[] = [];
  const running: RunningTestEnvd[] = [];
  const sandboxes = new Map<string, Promise<TargetSandbox>>();
  let tools: Promise<string> | undefined;
  const tempDir = (prefix: string) => {
    const d = mkdtempSync(`/tmp/aenv-envd-${prefix}-`);
    dirs.push(d);
    return d;
  };
  const toolsDir = () => (tools ??= buildTestTools(tempDir('conf-deps')).then((t) => t.dir));

  async function start(profile: SandboxProfile): Promise<TargetSandbox> {
    const accessToken = profile.secure ? TOKEN : undefined;
    let envd: RunningTestEnvd;
    let workdir: string;
    let init: Record<string, unknown>;
    if (profile.isolated) {
      const rootfs = tempDir(`conf-${profile.name}-rootfs`);
      buildTestRootfs(rootfs, { hostBash: true });
      envd = await startSandboxEnvd(rootfs, await toolsDir(), {
        E2B_SANDBOX_ID: IDS.sandboxId,
        E2B_TEMPLATE_ID: IDS.templateId,
      });
      workdir = '/home/user';
      init = { defaultUser: 'user', envVars: profile.envVars, timestamp: new Date().toISOString() };
    } else {
      envd = await startHostEnvd(await toolsDir());
      workdir = tempDir(`conf-${profile.name}-work`);
      init = { envVars: profile.envVars, defaultWorkdir: workdir };
    }
    running.push(envd);
    const res = await initEnvd(envd.url, { ...init, ...(accessToken ? { accessToken } : {}) });
    if (res.status !== 204) throw new Error(`envd /init answered ${res.status}: ${await res.text()}`);
    return {
      url: envd.url,
      routing: {},
      ...(accessToken ? { accessToken } : {}),
      workdir,
      ...(profile.isolated ? IDS : { sandboxId: '', templateId: '' }),
      sdk: (opts = {}) => sdkSandbox(envd.url, opts.withoutToken ? undefined : accessToken),
      logs: () => envd.logs(),
    };
  }

  return {
    name: 'envd',
    features: FEATURES,
    sandbox(profile) {
      let s = sandboxes.get(profile.name);
      if (!s) sandboxes.set(profile.name, (s = start(profile)));
      return s;
    },
    controlPlane: () => Promise.reject(new Error('an envd has no control plane')),
    async close() {
      await Promise.all(running.map((e) => e.stop()));
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    },
  };
}
