/** Waiting in tests: every wait ends in a value or a failed assertion that says what it waited for. */

/** Polls `fn` until it returns a truthy value; on timeout throws naming `what` and the last value or error. */
export async function waitFor<T>(
  fn: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  o: { timeoutMs: number; intervalMs?: number; what: string },
): Promise<T> {
  const deadline = Date.now() + o.timeoutMs;
  let last: string = 'nothing yet';
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v === undefined ? 'undefined' : JSON.stringify(v);
    } catch (err) {
      last = `error: ${err instanceof Error ? err.message : String(err)}`;
    }
    if (Date.now() >= deadline)
      throw new Error(`timed out after ${o.timeoutMs}ms waiting for ${o.what}; last: ${last}`);
    await new Promise((r) => setTimeout(r, Math.min(o.intervalMs ?? 100, Math.max(1, deadline - Date.now()))));
  }
}
