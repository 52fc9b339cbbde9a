/** The synthetic chat request a load generator sends: a prompt of about N tokens, unique per request. Pure. */

// Common short English words: each is one token in the usual BPE vocabularies (with its leading space), and one
// word is one token to the sim engine, so a prompt of N words is about N tokens anywhere and exactly N on the sim.
const WORDS = [
  'the',
  'of',
  'and',
  'to',
  'in',
  'is',
  'it',
  'that',
  'for',
  'on',
  'was',
  'with',
  'as',
  'at',
  'by',
  'this',
  'from',
  'or',
  'but',
  'not',
  'are',
  'be',
  'have',
  'one',
  'all',
  'were',
  'when',
  'there',
  'can',
  'an',
  'which',
  'their',
  'if',
  'do',
  'will',
  'each',
  'about',
  'how',
  'up',
  'out',
  'them',
  'then',
  'she',
  'many',
  'some',
  'so',
  'these',
  'would',
  'other',
  'into',
  'has',
  'more',
  'her',
  'two',
  'like',
  'him',
  'see',
  'time',
  'could',
  'no',
  'make',
  'than',
  'first',
  'been',
] as const;

/** What every request of a run shares. */
export interface PromptOptions {
  model: string;
  /** Words in the prompt, the request's number included (at least 1) */
  promptTokens: number;
  maxTokens: number;
  stream: boolean;
  /** Ask the engine to generate all maxTokens (vLLM, SGLang and llama.cpp honour `ignore_eos`). */
  ignoreEos?: boolean;
}

/**
 * Makes request bodies: the first word is the request's number, so no two prompts share a prefix and an engine's
 * prefix cache cannot make the figures look better than real traffic would. The rest is built once.
 */
export function requestBodies(o: PromptOptions): (n: number) => string {
  const words: string[] = [];
  for (let i = 0; i < Math.max(0, o.promptTokens - 1); i++)
    words.push(WORDS[(i * 7 + Math.floor(i / WORDS.length)) % WORDS.length]);
  const rest = words.length ? ` ${words.join(' ')}` : '';
  const extra: Record<string, unknown> = { max_tokens: o.maxTokens };
  if (o.stream) Object.assign(extra, { stream: true, stream_options: { include_usage: true } });
  if (o.ignoreEos) extra.ignore_eos = true;
  const head = `{"model":${JSON.stringify(o.model)},"messages":[{"role":"user","content":"`;
  const tail = `${rest}"}],${JSON.stringify(extra).slice(1)}`;
  return (n) => `${head}${n}${tail}`;
}
