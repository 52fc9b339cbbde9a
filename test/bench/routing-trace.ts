/**
 * `bench:routing`'s traffic: system prompts shared by many users with Zipf popularity, each request one user's
 * system prompt and a question of its own, streamed; and Poisson arrival times. Pure, seeded: every policy gets the
 * same requests at the same times.
 */
import { seededRandom } from '../../lib/random';

/** The shape of a trace. */
export interface TraceOptions {
  model: string;
  /** distinct system prompts */
  systems: number;
  /** words (sim tokens) in each */
  systemTokens: number;
  /** words in each request's own question */
  questionTokens: number;
  users: number;
  /** Zipf exponent of the system prompts' popularity */
  zipf: number;
  maxTokens: number;
  seed: number;
}

/** One request of the trace: its body and when it is sent (ms from the start). */
export interface TraceRequest {
  at: number;
  body: string;
}

/** Index into `weights` drawn with probability proportional to each weight. */
function draw(weights: number[], total: number, r: number): number {
  let x = r * total;
  for (let i = 0; i < weights.length; i++) {
    x -= weights[i] as number;
    if (x <= 0) return i;
  }
  return weights.length - 1;
}

/** `n` requests arriving at `ratePerS` on average (Poisson), each from a random user with that user's system prompt. */
export function makeTrace(o: TraceOptions, n: number, ratePerS: number): TraceRequest[] {
  const rnd = seededRandom(o.seed);
  // Each system prompt's words start with its own number, so no two share a cached block.
  const systems = Array.from({ length: o.systems }, (_, s) =>
    Array.from({ length: o.systemTokens }, (_, w) => `p${s}w${w % 97}`).join(' '),
  );
  const weights = systems.map((_, i) => 1 / (i + 1) ** o.zipf);
  const total = weights.reduce((a, b) => a + b, 0);
  // A user keeps one application (system prompt) for the whole trace.
  const userSystem = Array.from({ length: o.users }, () => draw(weights, total, rnd()));
  const out: TraceRequest[] = [];
  let at = 0;
  for (let i = 0; i < n; i++) {
    at += (-Math.log(1 - rnd()) * 1000) / ratePerS;
    const user = Math.floor(rnd() * o.users);
    const question = Array.from({ length: o.questionTokens }, (_, w) => (w === 0 ? `q${i}` : `w${w}`)).join(' ');
    const body = JSON.stringify({
      model: o.model,
      messages: [
        { role: 'system', content: systems[userSystem[user] as number] },
        { role: 'user', content: question },
      ],
      user: `user-${user}`,
      max_tokens: o.maxTokens,
      stream: true,
      stream_options: { include_usage: true },
    });
    out.push({ at, body });
  }
  return out;
}

/** A chat request whose one message is about `kb` KiB of words (the long-prompt case). */
export function bigBody(model: string, kb: number): string {
  const words: string[] = [];
  let size = 0;
  for (let i = 0; size < kb * 1024; i++) {
    const w = `w${i % 1000}`;
    words.push(w);
    size += w.length + 1;
  }
  return JSON.stringify({ model, messages: [{ role: 'user', content: words.join(' ') }], max_tokens: 1 });
}
