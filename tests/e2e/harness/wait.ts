// Waiting on conditions with a deadline (never a fixed sleep): poll a probe until
// it returns a value, and fail with a message that says what was awaited and
// what was last seen.
export class TimeoutError extends Error {}

export interface WaitOptions {
  timeoutMs?: number;
  intervalMs?: number;
}

/** Polls `probe` until it returns something other than undefined/false; returns that value. */
export async function waitFor<T>(
  description: string,
  probe: () => T | undefined | false | Promise<T | undefined | false>,
  { timeoutMs = 30_000, intervalMs = 200 }: WaitOptions = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      const detail = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new TimeoutError(`timed out after ${timeoutMs} ms waiting for ${description}${detail}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
