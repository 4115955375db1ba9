/**
 * What a started subsystem hands the composition root (start-node.ts): whatever it serves, and how it stops.
 * Every subsystem has one `start…(configSection, deps)` that returns one of these; the node closes them in the
 * order of node-shutdown.ts.
 */
export interface Subsystem {
  close(): Promise<void>;
}
