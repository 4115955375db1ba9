/**
 * Runs `fn` over `items` with at most `limit` calls in flight. After the first failure no new call starts;
 * the ones in flight finish, then that failure is thrown.
 */
export async function mapLimit<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  let failed: unknown;
  const worker = async (): Promise<void> => {
    while (failed === undefined && next < items.length) {
      const i = next++;
      try {
        await fn(items[i]!, i);
      } catch (e) {
        failed ??= e;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failed !== undefined) throw failed;
}
