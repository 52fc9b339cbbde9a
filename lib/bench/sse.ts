/**
 * Token timing of an OpenAI stream as it arrives (Server-Sent Events): when the first token came, the gaps between
 * tokens, whether it ended with `[DONE]`, an error event, and the usage the server reported. Pure: it is fed chunks
 * and the time each arrived.
 */

/** OpenAI's usage object, the two counts a benchmark needs. */
export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
}

type Json = Record<string, unknown>;

/** The text a chunk's first choice adds: a chat delta's content (or reasoning), or a completion's text. */
function chunkText(event: Json): string {
  const choice = (event.choices as Json[] | undefined)?.[0];
  if (!choice) return '';
  const delta = choice.delta as Json | undefined;
  if (delta) {
    for (const k of ['content', 'reasoning_content', 'reasoning'])
      if (typeof delta[k] === 'string' && delta[k] !== '') return delta[k];
    return '';
  }
  return typeof choice.text === 'string' ? choice.text : '';
}

/** The usage of a response body or stream event, when it carries one. */
export function usageOf(body: unknown): TokenUsage | null {
  const u = (body as { usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } | null } | null)?.usage;
  if (!u || typeof u.completion_tokens !== 'number') return null;
  return {
    promptTokens: typeof u.prompt_tokens === 'number' ? u.prompt_tokens : 0,
    completionTokens: u.completion_tokens,
  };
}

/** The message of an OpenAI-shaped error body (`{"error":{"message"}}`), or null. */
export function errorMessageOf(body: unknown): string | null {
  const e = (body as { error?: unknown } | null)?.error;
  if (e === undefined || e === null) return null;
  if (typeof e === 'string') return e;
  const m = (e as { message?: unknown }).message;
  return typeof m === 'string' ? m : JSON.stringify(e);
}

/**
 * Reads one stream. Each event whose first choice adds text counts as a token event (an engine may pack several
 * tokens in one; `usage` has the true count when the server sends it); the chat opener (role only) does not.
 */
export class StreamReader {
  /** When the first token event arrived, or null while none has. */
  firstTokenAt: number | null = null;
  /** Gaps between consecutive token events, in the unit of the times given (ms). */
  readonly gaps: number[] = [];
  tokenEvents = 0;
  done = false;
  /** The message of the first error event, if the server sent one. */
  error: string | null = null;
  usage: TokenUsage | null = null;
  private lastTokenAt = 0;
  private rest = '';

  /** Takes the next piece of the body and the time it arrived. */
  push(chunk: string, at: number): void {
    let buf = this.rest + (chunk.includes('\r') ? chunk.replace(/\r\n?/g, '\n') : chunk);
    for (let end = buf.indexOf('\n\n'); end >= 0; end = buf.indexOf('\n\n')) {
      this.event(buf.slice(0, end), at);
      buf = buf.slice(end + 2);
    }
    this.rest = buf;
  }

  private event(block: string, at: number): void {
    let data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('data:')) data += (data ? '\n' : '') + line.slice(line[5] === ' ' ? 6 : 5);
    }
    if (data === '') return; // a comment or a keep-alive
    if (data === '[DONE]') {
      this.done = true;
      return;
    }
    let event: Json;
    try {
      event = JSON.parse(data) as Json;
    } catch {
      this.error ??= `an event that is not JSON: ${data.slice(0, 120)}`;
      return;
    }
    const message = errorMessageOf(event);
    if (message !== null) {
      this.error ??= message;
      return;
    }
    this.usage = usageOf(event) ?? this.usage;
    if (chunkText(event) === '') return;
    if (this.firstTokenAt === null) this.firstTokenAt = at;
    else this.gaps.push(at - this.lastTokenAt);
    this.lastTokenAt = at;
    this.tokenEvents++;
  }
}
