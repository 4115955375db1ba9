// The gateway's own share of a create or fork answer, added to the node's `Server-Timing` phases
// (docs/benchmarks.md#gateway): choosing the node and recording the assignment.

/** Appends `name;dur=ms` entries (ms to 0.1) to the `server-timing` field of `headers`, keeping the node's. */
export function appendServerTiming(
  headers: Record<string, string | string[]>,
  phases: Record<string, number>,
): void {
  const ours = Object.entries(phases).map(([name, ms]) => `${name};dur=${ms.toFixed(1)}`);
  if (ours.length === 0) return;
  const prior = headers['server-timing'];
  const theirs = prior === undefined ? [] : [prior].flat();
  headers['server-timing'] = [...theirs, ...ours].join(', ');
}
