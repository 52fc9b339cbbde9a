/**
 * Reads the tokens an engine reports from the answer as it streams through, without parsing it: the `usage` object
 * is at the end of a JSON answer and in the last event of a stream (with stream_options.include_usage). A stream
 * without one is counted by its events (about one token each).
 */

/** How much of an answer's end is kept to find its usage in, bytes. */
const TAIL = 4096;
const EVENT = Buffer.from('data: {');

/** One answer's tokens, as far as its bytes tell. */
export class UsageMeter {
  private last: Buffer | null = null;
  private prev: Buffer | null = null;
  private prev2: Buffer | null = null;
  private events = 0;

  /** Takes one chunk of the answer (an 'data' listener: keeps references, copies nothing). */
  readonly push = (chunk: Buffer): void => {
    this.prev2 = this.prev;
    this.prev = this.last;
    this.last = chunk;
    for (let i = chunk.indexOf(EVENT); i >= 0; i = chunk.indexOf(EVENT, i + EVENT.length)) this.events++;
  };

  /** The prompt and completion tokens the answer reported, or null when it reported none. */
  reported(): { prompt: number; completion: number } | null {
    if (!this.last) return null;
    const parts = [this.prev2, this.prev, this.last].filter((b): b is Buffer => b !== null);
    const all = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
    const tail = all.subarray(Math.max(0, all.length - TAIL)).toString('latin1');
    const at = tail.lastIndexOf('"usage"');
    if (at < 0) return null;
    const prompt = /"prompt_tokens"\s*:\s*(\d+)/.exec(tail.slice(at));
    const completion = /"completion_tokens"\s*:\s*(\d+)/.exec(tail.slice(at));
    if (!prompt && !completion) return null;
    return { prompt: Number(prompt?.[1] ?? 0), completion: Number(completion?.[1] ?? 0) };
  }

  /** Events seen, when the answer is a stream (its content events: about one token each). */
  eventCount(): number {
    return this.events;
  }
}
