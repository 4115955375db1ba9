// The placement hint of a create (`ScheduleRequestHint` of packages/protocol/proto/scheduler/v1/scheduler.proto;
// docs/cluster.md#how-the-gateway-routes), read from the request body the gateway buffered. A body that is not
// JSON still gets placed (empty hint): the node gives the client its 400.
import { create } from '@bufbuild/protobuf';
import {
  NewColdSandboxHintSchema,
  NewSandboxHintSchema,
  ScheduleRequestHintSchema,
  type ScheduleRequestHint,
} from '@aenv/protocol';
import { jsonObjectOf } from './json-body.js';

/** Largest create body the gateway reads for its hint (and forwards from memory). */
export const MAX_HINT_BODY_BYTES = 64 * 1024;

function stringMap(v: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return out;
  for (const [k, x] of Object.entries(v)) if (typeof x === 'string') out[k] = x;
  return out;
}

const nonNegativeInt = (v: unknown, max: number): number =>
  typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= max ? v : 0;

export function placementHint(body: Buffer, cold: boolean): ScheduleRequestHint {
  const doc = jsonObjectOf(body) ?? {};
  const metadata = stringMap(doc.metadata);
  if (!cold)
    return create(ScheduleRequestHintSchema, {
      kind: { case: 'newSandbox', value: create(NewSandboxHintSchema, { metadata }) },
    });
  return create(ScheduleRequestHintSchema, {
    kind: {
      case: 'newColdSandbox',
      value: create(NewColdSandboxHintSchema, {
        cpuCount: nonNegativeInt(doc.cpuCount, 2_147_483_647),
        memoryMb: BigInt(nonNegativeInt(doc.memoryMB, Number.MAX_SAFE_INTEGER)),
        images: typeof doc.image === 'string' ? [doc.image] : [],
        metadata,
      }),
    },
  });
}
