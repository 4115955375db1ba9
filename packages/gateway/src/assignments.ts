// Which sandboxes a successful create or fork made (docs/cluster.md#how-the-gateway-routes, "Recording"): the
// x-agentenv-sandbox-id answer header, else the body's sandboxID|sandboxId|sandbox_id at the top level, under
// `data`, in `sandboxes[]`, or (aenv's fork answer) in a top-level array of `{sandbox: {...}}`.
const ID_KEYS = ['sandboxID', 'sandboxId', 'sandbox_id'];

function idOf(v: unknown): string | undefined {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return undefined;
  const o = v as Record<string, unknown>;
  for (const k of ID_KEYS) if (typeof o[k] === 'string' && o[k] !== '') return o[k];
  return undefined;
}

function collect(v: unknown, out: string[]): void {
  const direct = idOf(v);
  if (direct) {
    out.push(direct);
    return;
  }
  if (Array.isArray(v)) {
    for (const item of v) collect(item, out);
    return;
  }
  if (v === null || typeof v !== 'object') return;
  const o = v as Record<string, unknown>;
  if (o.data !== undefined) collect(o.data, out);
  if (Array.isArray(o.sandboxes)) for (const s of o.sandboxes) collect(s, out);
  if (o.sandbox !== undefined) collect(o.sandbox, out);
}

export function createdSandboxIds(headers: Record<string, string | string[]>, body: Buffer): string[] {
  const h = headers['x-agentenv-sandbox-id'];
  const fromHeader = Array.isArray(h) ? h[0] : h;
  if (fromHeader) return [fromHeader];
  let doc: unknown;
  try {
    doc = JSON.parse(body.toString('utf8'));
  } catch {
    return [];
  }
  const out: string[] = [];
  collect(doc, out);
  return [...new Set(out)];
}
