// The factory's transaction: steps run in their order, and a failure at any point undoes exactly what the steps
// before it made, in reverse, whatever an undo action does. The host parts (slot, runtime, envd) are exercised by
// test/e2e/factory-rollback.test.ts on a real node.
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../util/log.js';
import type { BackendState } from './record-state.js';
import {
  ASSEMBLY_STEPS,
  SandboxFactory,
  type AssemblyPlan,
  type AssemblyStep,
  type SandboxFactoryOptions,
} from './sandbox-factory.js';

const plan: AssemblyPlan = {
  containerId: 'c1',
  templateId: 't1',
  resources: { cpuCount: 1, memoryMB: 128 },
  state: {
    imageRef: 'aenv/base',
    manifestDigest: 'sha256:1',
    rootfs: { layers: ['/l1'] },
    toolsVersion: 'v1',
    envdEnv: {},
  },
  policy: null,
};

/** A step that notes its run and its undo in `trail`, and throws when told to. */
function noting(
  trail: string[],
  name: string,
  opts: { fail?: boolean; undoFails?: boolean } = {},
): AssemblyStep {
  return {
    name,
    async run(_f, a) {
      trail.push(`run ${name}`);
      if (opts.fail) throw new Error(`${name} failed`);
      a.undo(async () => {
        trail.push(`undo ${name}`);
        if (opts.undoFails) throw new Error(`undo of ${name} failed`);
      });
      if (name === 'slot') {
        a.slot = { index: 0, netnsPath: '/run/netns/x', hostInteractionIp: '10.0.0.2' } as NonNullable<
          typeof a.slot
        >;
        a.state = plan.state as BackendState;
      }
    },
  };
}

const logged: string[] = [];
const logger = createLogger('json', 'error', { write: (line: string) => logged.push(line) });
const factoryWith = (steps: AssemblyStep[]) =>
  new SandboxFactory({ logger } as unknown as SandboxFactoryOptions, steps);

afterEach(() => {
  delete process.env.AENV_FAULT_FAIL_AFTER;
  logged.length = 0;
});

describe('SandboxFactory.assemble', () => {
  it('has one ordered list of steps, from the slot to envd /init and the limits', () => {
    expect(ASSEMBLY_STEPS.map((s) => s.name)).toEqual([
      'slot',
      'placement',
      'image-lease',
      'uid-range',
      'spec',
      'volumes',
      'runtime',
      'policy',
      'envd-healthy',
      'envd-init',
      'limits',
    ]);
  });

  it('runs the steps in order and keeps what they made', async () => {
    const trail: string[] = [];
    const s = await factoryWith([noting(trail, 'slot'), noting(trail, 'b'), noting(trail, 'c')]).assemble(
      plan,
    );
    expect(trail).toEqual(['run slot', 'run b', 'run c']);
    expect(s.containerId).toBe('c1');
    expect(s.slot.index).toBe(0);
    expect(s.restored).toBe(false);
  });

  it('undoes the steps before a failed one in reverse, and rethrows its error', async () => {
    const trail: string[] = [];
    const f = factoryWith([
      noting(trail, 'slot'),
      noting(trail, 'b'),
      noting(trail, 'c', { fail: true }),
      noting(trail, 'd'),
    ]);
    await expect(f.assemble(plan)).rejects.toThrow('c failed');
    expect(trail).toEqual(['run slot', 'run b', 'run c', 'undo b', 'undo slot']);
  });

  it('goes on undoing when an undo action fails, and logs it', async () => {
    const trail: string[] = [];
    const f = factoryWith([
      noting(trail, 'slot'),
      noting(trail, 'b', { undoFails: true }),
      noting(trail, 'c', { fail: true }),
    ]);
    await expect(f.assemble(plan)).rejects.toThrow('c failed');
    expect(trail).toEqual(['run slot', 'run b', 'run c', 'undo b', 'undo slot']);
    expect(logged.join('')).toContain('rollback step failed');
  });

  it('fails after the step AENV_FAULT_FAIL_AFTER names, undoing that step too', async () => {
    process.env.AENV_FAULT_FAIL_AFTER = 'factory:b';
    const trail: string[] = [];
    const f = factoryWith([noting(trail, 'slot'), noting(trail, 'b'), noting(trail, 'c')]);
    await expect(f.assemble(plan)).rejects.toThrow('failure injected after factory:b');
    expect(trail).toEqual(['run slot', 'run b', 'undo b', 'undo slot']);
  });
});

describe('the runtime spec of a sandbox with attached drives', () => {
  it("adds what each writable drive may hold to the sandbox's disk limit (read-only ones hold nothing)", () => {
    const f = new SandboxFactory({
      logger,
      pidsLimit: 64,
      envdInitKey: () => 'k',
    } as unknown as SandboxFactoryOptions);
    const drive = (readOnly: boolean, sizeMB?: number) => ({
      id: `d${String(readOnly)}${sizeMB ?? ''}`,
      image: { reference: 'r', manifestDigest: 'sha256:2' },
      layers: ['/l2'],
      mountPath: `/mnt/${String(readOnly)}${sizeMB ?? ''}`,
      readOnly,
      ...(sizeMB === undefined ? {} : { sizeMB }),
    });
    const state = {
      ...(plan.state as BackendState),
      rootfs: { layers: ['/l1'], drives: [drive(false, 2048), drive(true, 4096), drive(false, 1024)] },
    };
    const slot = { index: 0, netnsPath: '/run/netns/x', hostInteractionIp: '10.0.0.2' } as Parameters<
      SandboxFactory['spec']
    >[1];
    const range = { hostStart: 100000, size: 65536 };
    const withDisk = { ...plan, resources: { cpuCount: 1, memoryMB: 128, diskSizeMB: 1024 } };
    expect(f.spec(withDisk, slot, state, range).resources.diskMB).toBe(1024 + 2048 + 1024);
    // No disk limit asked for: none is made up.
    expect(f.spec(plan, slot, state, range).resources.diskMB).toBeUndefined();
  });
});
