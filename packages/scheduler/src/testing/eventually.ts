import { setTimeout as sleep } from 'node:timers/promises';

/** Retries `check` until it stops throwing, for at most `timeoutMs`; then throws its last error. */
export async function eventually<T>(
  check: () => Promise<T> | T,
  timeoutMs = 10_000,
  stepMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await sleep(stepMs);
    }
  }
}
