// What the gateway reads of a request body it forwards: the body goes to the node unchanged, and a body that is not
// a JSON object only means the gateway decides without it (the node gives the client its own 400).

/** The body as a JSON object, or undefined when it is not one (not JSON, null, an array, a scalar). */
export function jsonObjectOf(body: Buffer): Record<string, unknown> | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  return doc !== null && typeof doc === 'object' && !Array.isArray(doc)
    ? (doc as Record<string, unknown>)
    : undefined;
}
