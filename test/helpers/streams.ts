/** Long streamed chat completions through a gateway, checked token by token against what the sim engine must send. */
import { fakeToken, promptSeed } from '../../lib/sim/openai';
import { TEST_API_KEY } from './test-key';

/** One stream as the client saw it. */
export interface StreamOutcome {
  prompt: string;
  status: number;
  /** the content deltas, concatenated */
  content: string;
  /** the reply the sim engine gives this prompt with this many tokens */
  expected: string;
  /** the stream's last event was `data: [DONE]` */
  done: boolean;
  /** a network error (a cut stream), or null */
  error: string | null;
  ms: number;
}

/** The sim engine's reply to `prompt` (one user message) with `maxTokens` tokens. */
export function simReply(prompt: string, maxTokens: number): string {
  const seed = promptSeed(prompt);
  return Array.from({ length: maxTokens }, (_, i) => fakeToken(seed, i)).join('');
}

/** Streams one chat completion of `maxTokens` tokens through the gateway and reads it to the end. */
export async function streamChat(
  gatewayUrl: string,
  model: string,
  prompt: string,
  maxTokens: number,
  apiKey = TEST_API_KEY,
): Promise<StreamOutcome> {
  const started = Date.now();
  const out: StreamOutcome = {
    prompt,
    status: 0,
    content: '',
    expected: simReply(prompt, maxTokens),
    done: false,
    error: null,
    ms: 0,
  };
  try {
    const res = await fetch(`${gatewayUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({
        model,
        stream: true,
        max_tokens: maxTokens,
        messages: [{ role: 'user', content: prompt }],
      }),
    });
    out.status = res.status;
    const text = await res.text();
    const events = text
      .split('\n\n')
      .map((e) => e.trim())
      .filter((e) => e.startsWith('data: '))
      .map((e) => e.slice(6));
    out.done = events.at(-1) === '[DONE]';
    for (const e of events) {
      if (e === '[DONE]') continue;
      const delta = (JSON.parse(e) as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content;
      if (delta) out.content += delta;
    }
  } catch (err) {
    out.error = `${(err as Error).message}${(err as { cause?: Error }).cause ? `: ${(err as { cause: Error }).cause.message}` : ''}`;
  }
  out.ms = Date.now() - started;
  return out;
}
