import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';

/**
 * A handler of the node's data plane (the sandbox proxy, template upload links): it claims requests before the
 * control-plane router sees them (api/http-server.ts).
 */
export interface DataPlane {
  /** True when the request is sandbox traffic (docs/networking.md#data-plane-routing). */
  claims(req: IncomingMessage): boolean;
  handle(req: IncomingMessage, res: ServerResponse): void;
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
}
