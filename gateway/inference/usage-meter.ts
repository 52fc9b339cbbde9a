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
  /** The last chunks, just enough of them to hold TAIL bytes (references: nothing is copied until the end). */
  private readonly tail: Buffer[] = [];
  private tailBytes = 0;
  private events = 0;

  /** Takes one chunk of the answer (an 'data' listener: keeps references, copies nothing). */
  readonly push = (chunk: Buffer): void => {
    this.tail.push(chunk);
    this.tailBytes += chunk.length;
    while (this.tail.length > 1 && this.tailBytes - (this.tail[0] as Buffer).length >= TAIL)
      this.tailBytes -= (this.tail.shift() as Buffer).length;
    for (let i = chunk.indexOf(EVENT); i >= 0; i = chunk.indexOf(EVENT, i + EVENT.length)) this.events++;
  };

  /** The prompt and completion tokens the answer reported, or null when it reported none. */
  reported(): { prompt: number; completion: number } | null {
    if (this.tail.length === 0) return null;
    const all = this.tail.length === 1 ? (this.tail[0] as Buffer) : Buffer.concat(this.tail);
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
