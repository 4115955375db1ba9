import type { IncomingMessage } from 'node:http';
import type { DataPlane } from '@aenv/proxy';

/** The first handler that claims the request (asked in list order), or none: the control plane serves it. */
export function claimerOf(handlers: readonly DataPlane[], req: IncomingMessage): DataPlane | undefined {
  for (const handler of handlers) if (handler.claims(req)) return handler;
  return undefined;
}

/**
 * The node's data plane, in the order the front door asks it. Sandbox traffic comes first: it is by far the
 * most frequent, and it is recognised by its host or routing headers alone, whatever its path, so a sandbox's
 * own `/templates/…/upload` path still reaches the sandbox. Template upload links (signed, no API key) come
 * next, then the volume content API (a volume's token, no API key). Everything else is the control plane's.
 */
export function nodeDataPlanes(parts: {
  sandboxProxy: DataPlane;
  templateUploads: DataPlane;
  volumeContent?: DataPlane;
}): DataPlane[] {
  return [parts.sandboxProxy, parts.templateUploads, ...(parts.volumeContent ? [parts.volumeContent] : [])];
}
