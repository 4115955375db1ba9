// The factory's transaction: steps run in their order, and a failure at any point undoes exactly what the steps
// before it made, in reverse, whatever an undo action does. The host parts (slot, runtime, envd) are exercised by
// test/e2e/factory-rollback.test.ts on a real node.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
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

describe("envd's health and /init", () => {
  const servers: Server[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  });

  /** An HTTP server on loopback that answers like envd and notes each request; `initStatus` for /init. */
  async function envdAt(port: number, seen: string[], initStatus = 204): Promise<number> {
    const server = createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      req.resume();
      req.on('end', () => {
        res.statusCode = req.url === '/init' ? initStatus : 204;
        res.end(initStatus === 204 ? undefined : 'init key mismatch');
      });
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
    return (server.address() as AddressInfo).port;
  }

  async function freePort(): Promise<number> {
    const s = createServer();
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    const { port } = s.address() as AddressInfo;
    await new Promise((r) => s.close(r));
    return port;
  }

  /** The slot and runtime steps stand in; envd-healthy and envd-init are the product's own. */
  function assemble(port: number, restored: boolean) {
    const envdSteps = ASSEMBLY_STEPS.filter((s) => s.name === 'envd-healthy' || s.name === 'envd-init');
    const before: AssemblyStep = {
      name: 'slot',
      async run(_f, a) {
        a.slot = { index: 0, netnsPath: '/run/netns/x', hostInteractionIp: '127.0.0.1' } as NonNullable<
          typeof a.slot
        >;
        a.state = plan.state as BackendState;
        a.restored = restored;
      },
    };
    const f = new SandboxFactory(
      {
        logger,
        envdPort: port,
        envdPollMs: 10,
        envdInitTimeoutMs: 5000,
        runtime: { isRunning: async () => true, diskLimitSet: async () => {} },
      } as unknown as SandboxFactoryOptions,
      [before, ...envdSteps],
    );
    return f.assemble({
      ...plan,
      init: () => ({ body: { envVars: {} }, credentials: { initKey: 'k' } }),
    });
  }

  it('a booted envd: waits for /health, then /init', async () => {
    const seen: string[] = [];
    const port = await envdAt(0, seen);
    await assemble(port, false);
    expect(seen).toEqual(['GET /health', 'POST /init']);
  });

  it('a restored envd: /init is the first request', async () => {
    const seen: string[] = [];
    const port = await envdAt(0, seen);
    await assemble(port, true);
    expect(seen).toEqual(['POST /init']);
  });

  it('a restored envd that does not listen yet: /init waits for /health and is sent again', async () => {
    const seen: string[] = [];
    const port = await freePort();
    const started = new Promise((r) => setTimeout(r, 100)).then(() => envdAt(port, seen));
    await assemble(port, true);
    await started;
    expect(seen[0]).toBe('GET /health');
    expect(seen.at(-1)).toBe('POST /init');
    expect(seen.filter((r) => r === 'POST /init')).toHaveLength(1);
  });

  it("a restored envd's refusal of /init fails the start at once, with envd's answer", async () => {
    const seen: string[] = [];
    const port = await envdAt(0, seen, 401);
    await expect(assemble(port, true)).rejects.toThrow(/envd \/init answered 401: init key mismatch/);
    expect(seen).toEqual(['POST /init']);
  });
});
