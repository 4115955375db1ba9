// The runtime driver contract (runtime/testing/driver-contract.ts) run by the container driver: real runc,
// overlayfs, a btrfs loop volume, cgroups and (when installed) CRIU. Root only.
import { constants } from 'node:fs';
import { access, chmod, mkdtemp, rm, rmdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { run } from '../../../util/exec.js';
import { defineDriverContract } from '../../testing/driver-contract.js';
import { ContainerDriver } from './container-driver.js';
import { rangeOfBlock } from './id-ranges.js';
import { readMounts } from './mountinfo.js';
import {
  buildBusyboxLower,
  buildTestTools,
  createNetnsFile,
  execInSandbox,
  removeNetnsFile,
} from './test-fixtures.js';

const IS_ROOT = process.getuid?.() === 0;
const UID_START = 300000;
const LAYOUT = { start: UID_START, size: 65536, count: 64 };
const CRIU = process.env.AENV_CRIU_PATH ?? '/var/lib/aenv/deps/criu/current/bin/criu';
const hasCriu =
  IS_ROOT &&
  (await access(CRIU, constants.X_OK).then(
    () => true,
    () => false,
  ));

if (IS_ROOT) {
  defineDriverContract('container', async () => {
    const base = await mkdtemp('/var/tmp/aenv-driver-contract-');
    await chmod(base, 0o755); // the sandbox uid ranges must reach their rootfs and the tools dir
    const cgroupParent = `aenv-contract-${process.pid}`;
    const lower = join(base, 'lower-busybox');
    await buildBusyboxLower(lower, UID_START);
    const tools = await buildTestTools(join(base, 'tools'));
    const driver = new ContainerDriver({
      homePath: join(base, 'home'),
      runtimePath: join(base, 'run'),
      runcPath: 'runc',
      criuPath: hasCriu ? CRIU : null,
      uidMapHostStart: UID_START,
      uidMapSize: LAYOUT.size,
      uidRanges: LAYOUT.count,
      subidFiles: [],
      cowVolume: 'loop-btrfs',
      cowVolumeSizeGb: 4,
      diskLimits: true,
      cgroupParent,
    });
    await driver.init();
    const netns: string[] = [];
    let seq = 0;
    return {
      driver,
      tools,
      canCheckpoint: hasCriu,
      async spec(workload = '') {
        const n = ++seq;
        const id = `c${process.pid}-${n}`;
        const netnsPath = join(base, `netns-${n}`);
        await createNetnsFile(netnsPath);
        netns.push(netnsPath);
        return {
          id,
          hostname: id,
          idRange: rangeOfBlock(LAYOUT, (n % LAYOUT.count) + 1),
          rootfs: { layers: [lower] },
          resources: { cpuCount: 1, memoryMB: 128, pidsLimit: 128 },
          netnsPath,
          nameservers: ['192.0.2.53'],
          initEnv: { AENV_TEST_CMD: workload },
        };
      },
      async exec(id, command) {
        const r = await execInSandbox(driver.paths(id).upper, command);
        if (r.code !== 0) throw new Error(`${command} exited ${r.code}: ${r.output}`);
        return r.output;
      },
      async cleanup() {
        await driver.reconcile([]).catch(() => {});
        await driver.close();
        await run('umount', [join(base, 'home', 'sandboxes')], { allowFailure: true });
        for (const p of netns) await removeNetnsFile(p);
        for (const m of (await readMounts()).filter((x) => x.mountPoint.startsWith(base))) {
          await run('umount', ['-l', m.mountPoint], { allowFailure: true });
        }
        await rm(base, { recursive: true, force: true });
        const roots = new Set(
          (await readMounts())
            .filter((m) => m.fsType === 'cgroup' || m.fsType === 'cgroup2')
            .map((m) => m.mountPoint),
        );
        for (const root of roots) await rmdir(join(root, cgroupParent)).catch(() => {});
      },
    };
  });
} else {
  describe('runtime driver contract: container', () => {
    it.skip('needs root', () => {});
  });
}
