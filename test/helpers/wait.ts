/** Waiting in tests: every wait ends in a value or a failed assertion that says what it waited for. */

/** Polls `fn` until it returns a truthy value; throws naming `what` and the last value on timeout. */
export async function waitFor<T>(fn: () => Promise<T | undefined | null | false> | T | undefined | null | false, o: { timeoutMs: number; intervalMs?: number; what: string }): Promise<T> {
  const deadline = Date.now() + o.timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (err) {
      last = err instanceof Error ? err.message : err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${o.timeoutMs}ms waiting for ${o.what}; last: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, o.intervalMs ?? 100));
  }
}
