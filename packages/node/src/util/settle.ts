/**
 * Waits for every step, then fails with the first error (in the order given) if any step failed. Unlike
 * `Promise.all`, nothing is still running when it fails, so the caller may take apart what the steps worked on.
 */
export async function allOrFirstError(steps: readonly Promise<unknown>[]): Promise<void> {
  const settled = await Promise.allSettled(steps);
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
}
