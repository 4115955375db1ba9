// Fields of E2B's sandbox requests (the e2b SDK's `NewSandbox`, `NewSandboxV2`, `SandboxNetworkConfig`,
// `SandboxNetworkUpdateConfig`, `SandboxSnapshotRequest`) that aenv does not implement. A request that asks for one is refused with a 400
// naming it rather than served without it: most are security or network settings whose silent loss would leave
// a sandbox more open than its creator asked for. Leaving a field out, or giving its "nothing" value (null, an
// empty list or map), is accepted. Fields no SDK sends are ignored, as E2B's API ignores them
// (docs/differences.md).
import { ApiError } from './errors.js';

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Whether `v` asks for something: not absent, null, "", [] or {}. */
function given(v: unknown): boolean {
  if (v === undefined || v === null || v === '') return false;
  if (Array.isArray(v)) return v.length > 0;
  if (isObject(v)) return Object.keys(v).length > 0;
  return true;
}

function refuse(field: string, why: string): never {
  throw new ApiError(400, `${field} is not supported by this server (${why}); leave it out`);
}

/** Ingress settings are the create's (`SandboxNetworkUpdateConfig` has none): an update cannot change them. */
const CREATE_ONLY_NETWORK_FIELDS = ['maskRequestHost', 'httpsPorts'];

/**
 * `POST /sandboxes`, `POST /v2/sandboxes`, `POST /sandboxes-cold`: refuses what the body asks for and aenv cannot do. `volumes`: the
 * route mounts `volumeMounts` (docs/volumes.md); without volumes they are refused.
 */
export function refuseUnsupportedCreateFields(body: unknown, opts: { volumes?: boolean } = {}): void {
  if (!isObject(body)) return;
  if (given(body.mcp)) refuse('mcp', 'the MCP gateway is not implemented');
  if (isObject(body.iam) ? given(body.iam.tokens) : given(body.iam))
    refuse('iam', 'workload identity tokens are not implemented');
  if (!opts.volumes && given(body.volumeMounts)) refuse('volumeMounts', 'this node has no volumes');
}

/** `PUT /sandboxes/{id}/network`. */
export function refuseUnsupportedNetworkUpdateFields(body: unknown): void {
  if (!isObject(body)) return;
  for (const field of CREATE_ONLY_NETWORK_FIELDS) {
    if (given(body[field]))
      throw new ApiError(
        400,
        `${field} cannot be changed by a network update; it is set when the sandbox is created`,
      );
  }
}

/** `POST /sandboxes/{id}/snapshots`: the Python SDK's `create_snapshot(mode="filesystem")` sends `memory: false`. */
export function refuseUnsupportedSnapshotFields(body: unknown): void {
  if (isObject(body) && body.memory === false)
    refuse('memory', 'filesystem-only snapshots are not implemented: every snapshot holds memory and disk');
}
