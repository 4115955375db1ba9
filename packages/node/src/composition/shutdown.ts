// The order a node stops in (SIGINT/SIGTERM, docs/architecture.md "Restart"). It is not simply the reverse of
// the start: the scheduler must see the node leaving before the sandboxes pause, and the front door keeps
// serving while they pause (a client may still read a sandbox's files until its pause begins).

import type { Logger } from '../util/log.js';

export interface ShutdownStep {
  name: string;
  run(): Promise<void> | void;
}

/** What the stop sequence stops, as the composition root started it. */
export interface StartedNode {
  reporter?: { drain(): Promise<void>; close(): Promise<void> };
  unheldRetention?: { stop(): Promise<void> };
  frontDoor: { closeIdle(): void; close(): Promise<void> };
  templates: { close(): Promise<void> };
  observability: { close(): Promise<void> };
  orchestrator: { close(): Promise<void> };
  webhooks?: { stop(): Promise<void> };
  secrets?: { stop(): void };
  extension?: { drain(): Promise<void> };
  volumes?: { close(): Promise<void> };
  backend: { close(): Promise<void> };
  network: { close(): Promise<void> };
  runtime: { close(): Promise<void> };
  images: { close(): Promise<void> };
  repository: { close(): Promise<void> };
  launcher?: { close(): Promise<void> };
  db: { close(): void };
  host: { close(): Promise<void> };
}

export function shutdownSteps(n: StartedNode): ShutdownStep[] {
  const steps: (ShutdownStep | false)[] = [
    // LINGERING: the scheduler places nothing new here while the sandboxes pause.
    !!n.reporter && { name: 'scheduler report: lingering', run: () => n.reporter!.drain() },
    !!n.unheldRetention && {
      name: 'retention of sandboxes held by no node',
      run: () => n.unheldRetention!.stop(),
    },
    { name: 'front door: idle connections', run: () => n.frontDoor.closeIdle() },
    { name: 'template builds', run: () => n.templates.close() },
    { name: 'sandbox observability', run: () => n.observability.close() },
    // Pauses every running sandbox: each pause is committed before anything it needs stops.
    { name: 'orchestrator: pause sandboxes', run: () => n.orchestrator.close() },
    // After the pauses, whose events it queued; what is not delivered stays in the outbox for the next start.
    !!n.webhooks && { name: 'webhook deliveries', run: () => n.webhooks!.stop() },
    !!n.secrets && { name: 'secrets copy', run: () => n.secrets!.stop() },
    !!n.reporter && { name: 'scheduler report: unregister', run: () => n.reporter!.close() },
    !!n.extension && { name: 'custom extension: pending hooks', run: () => n.extension!.drain() },
    !!n.volumes && { name: 'volume leases', run: () => n.volumes!.close() },
    { name: 'backend', run: () => n.backend.close() },
    { name: 'front door', run: () => n.frontDoor.close() },
    { name: 'network', run: () => n.network.close() },
    { name: 'runtime', run: () => n.runtime.close() },
    { name: 'images', run: () => n.images.close() },
    { name: 'snapshot repository', run: () => n.repository.close() },
    // After everything that runs host commands; any later one starts from this process again.
    !!n.launcher && { name: 'process launcher', run: () => n.launcher!.close() },
    // Last: every subsystem above may write its state until it stopped, and the lock keeps a second node out.
    { name: 'state db', run: () => n.db.close() },
    { name: 'node dirs lock', run: () => n.host.close() },
  ];
  return steps.filter((s): s is ShutdownStep => s !== false);
}

/** Runs the steps one after the other; a failing step stops the sequence (the process exits with it). */
export async function runShutdown(
  steps: readonly ShutdownStep[],
  logger: Pick<Logger, 'info'>,
): Promise<void> {
  logger.info('shutting down: pausing sandboxes');
  for (const step of steps) {
    try {
      await step.run();
    } catch (err) {
      throw new Error(`shutdown step "${step.name}" failed`, { cause: err });
    }
  }
  logger.info('shutdown complete');
}
