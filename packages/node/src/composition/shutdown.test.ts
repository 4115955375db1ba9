import { describe, expect, it } from 'vitest';
import { runShutdown, shutdownSteps, type StartedNode } from './shutdown.js';

const quiet = { info() {} };

/** A node whose parts record when they are stopped; `fail` names a part whose stop throws. */
function recordingNode(opts: { reporter?: boolean; extension?: boolean; fail?: string } = {}) {
  const calls: string[] = [];
  const part = (name: string) => async () => {
    calls.push(name);
    if (opts.fail === name) throw new Error(`${name} broke`);
  };
  const node: StartedNode = {
    ...(opts.reporter ? { reporter: { drain: part('reporter.drain'), close: part('reporter.close') } } : {}),
    frontDoor: { closeIdle: () => void calls.push('frontDoor.closeIdle'), close: part('frontDoor.close') },
    templates: { close: part('templates') },
    observability: { close: part('observability') },
    orchestrator: { close: part('orchestrator') },
    ...(opts.extension ? { extension: { drain: part('extension.drain') } } : {}),
    backend: { close: part('backend') },
    network: { close: part('network') },
    runtime: { close: part('runtime') },
    images: { close: part('images') },
    repository: { close: part('repository') },
    db: { close: () => void calls.push('db') },
    host: { close: part('host') },
  };
  return { node, calls };
}

describe('node shutdown order', () => {
  it('tells the scheduler first, pauses the sandboxes while the front door serves, then stops the rest', async () => {
    const { node, calls } = recordingNode({ reporter: true, extension: true });
    await runShutdown(shutdownSteps(node), quiet);
    expect(calls).toEqual([
      'reporter.drain',
      'frontDoor.closeIdle',
      'templates',
      'observability',
      'orchestrator',
      'reporter.close',
      'extension.drain',
      'backend',
      'frontDoor.close',
      'network',
      'runtime',
      'images',
      'repository',
      'db',
      'host',
    ]);
  });

  it('leaves out the parts a node did not start', async () => {
    const { node, calls } = recordingNode();
    await runShutdown(shutdownSteps(node), quiet);
    expect(calls).not.toContain('reporter.drain');
    expect(calls).not.toContain('extension.drain');
    expect(calls[0]).toBe('frontDoor.closeIdle');
    expect(calls.at(-1)).toBe('host');
  });

  it('stops at a failing step and names it: nothing a paused sandbox still needs is torn down', async () => {
    const { node, calls } = recordingNode({ fail: 'orchestrator' });
    await expect(runShutdown(shutdownSteps(node), quiet)).rejects.toThrow(
      'shutdown step "orchestrator: pause sandboxes" failed',
    );
    expect(calls.at(-1)).toBe('orchestrator');
    expect(calls).not.toContain('network');
  });
});
