/**
 * Reads the tokens an engine reports from the answer as it streams through, without parsing it: the `usage` object
 * is at the end of a JSON answer and in the last event of a stream (with stream_options.include_usage). A stream
 * without one is counted by its events (about one token each).
 */

/** How much of an answer's end is kept to find its usage in, bytes. */
const TAIL = 4096;
const EVENT = Buffer.from('data: {');
const USAGE = Buffer.from('"usage"');
const PROMPT = Buffer.from('"prompt_tokens"');
const COMPLETION = Buffer.from('"completion_tokens"');

/** The whole number after `"name"` and a colon, searching from `from`; null when there is none. */
function numberAfter(b: Buffer, name: Buffer, from: number): number | null {
  let i = b.indexOf(name, from);
  if (i < 0) return null;
  i += name.length;
  while (b[i] === 0x20 || b[i] === 0x3a || b[i] === 0x0a || b[i] === 0x0d || b[i] === 0x09) i++;
  let n = 0;
  const start = i;
  for (; i < b.length && (b[i] as number) >= 0x30 && (b[i] as number) <= 0x39; i++)
    n = n * 10 + (b[i] as number) - 0x30;
  return i > start ? n : null;
}

/** One answer's tokens, as far as its bytes tell. */
export class UsageMeter {
  /** The last chunks, just enough of them to hold TAIL bytes (references: nothing is copied until the end). */
  private readonly tail: Buffer[] = [];
  private tailBytes = 0;
  private events = 0;
  /** reported()'s answer once asked, until the next chunk (asked twice at the end: the quota's settle, the metrics) */
  private read: { prompt: number; completion: number } | null | undefined = undefined;

  /** Takes one chunk of the answer (keeps references, copies nothing); its events are counted in a `stream`. */
  push(chunk: Buffer, stream = true): void {
    this.read = undefined;
    this.tail.push(chunk);
    this.tailBytes += chunk.length;
    while (this.tail.length > 1 && this.tailBytes - (this.tail[0] as Buffer).length >= TAIL)
      this.tailBytes -= (this.tail.shift() as Buffer).length;
    if (stream) for (let i = chunk.indexOf(EVENT); i >= 0; i = chunk.indexOf(EVENT, i + EVENT.length)) this.events++;
  }

  /** The prompt and completion tokens the answer reported, or null when it reported none. */
  reported(): { prompt: number; completion: number } | null {
    if (this.read === undefined) this.read = this.find();
    return this.read;
  }

  private find(): { prompt: number; completion: number } | null {
    if (this.tail.length === 0) return null;
    const all = this.tail.length === 1 ? (this.tail[0] as Buffer) : Buffer.concat(this.tail);
    // Read on the bytes: no string of the answer is built.
    const at = all.lastIndexOf(USAGE);
    if (at < 0) return null;
    const prompt = numberAfter(all, PROMPT, at);
    const completion = numberAfter(all, COMPLETION, at);
    if (prompt === null && completion === null) return null;
    return { prompt: prompt ?? 0, completion: completion ?? 0 };
  }

  /** Events seen, when the answer is a stream (its content events: about one token each). */
  eventCount(): number {
    return this.events;
  }
}
