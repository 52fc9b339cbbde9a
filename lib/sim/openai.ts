/** The sim engine's OpenAI wire format: request parsing, fake tokens and response shapes. Pure, no I/O. */
import type { ErrorCode } from '../errors';
import { requestProblem, roleProblem, singlePrompt } from './validate';

/** Which OpenAI endpoint a request came in on. */
export type SimEndpoint = 'chat' | 'text';

/** A validated completion request, reduced to what the sim engine needs. */
export interface SimRequest {
  endpoint: SimEndpoint;
  model: string;
  promptText: string;
  promptTokens: number;
  maxTokens: number;
  stream: boolean;
  includeUsage: boolean;
}

/** The outcome of parsing a request body. */
export type SimParseResult = { kind: 'ok'; request: SimRequest } | { kind: 'error'; code: ErrorCode; message: string };

/** OpenAI's `usage` object, with the prompt tokens its prefix cache served. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

type Json = Record<string, unknown>;

export const DEFAULT_MAX_TOKENS = 16;
/** Far above any real context window; keeps a typo from tying a connection up for hours. */
const MAX_MAX_TOKENS = 100_000;

const WORDS = [
  'amber',
  'basalt',
  'cedar',
  'delta',
  'ember',
  'fjord',
  'granite',
  'harbor',
  'iris',
  'juniper',
  'kelp',
  'lumen',
  'meadow',
  'nimbus',
  'onyx',
  'prairie',
  'quartz',
  'river',
  'sierra',
  'tundra',
  'umber',
  'valley',
  'willow',
  'xenon',
  'yarrow',
  'zephyr',
  'atlas',
  'boreal',
  'cobalt',
  'dune',
  'estuary',
  'flint',
] as const;

/** Words the way the sim engine counts tokens: whitespace-separated runs. */
export function countWords(text: string): number {
  return text.split(/\s+/).filter((w) => w.length > 0).length;
}

/** FNV-1a of the prompt: the seed that makes the same prompt always get the same reply. */
export function promptSeed(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** Token `i` of the reply to the prompt with seed `seed`, with its leading space (none for the first). */
export function fakeToken(seed: number, i: number): string {
  let h = (seed ^ Math.imul(i + 1, 0x9e3779b1)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  h = (h ^ (h >>> 16)) >>> 0;
  const word = WORDS[h % WORDS.length];
  return i === 0 ? word : ` ${word}`;
}

/** Parses and validates a `/v1/chat/completions` or `/v1/completions` body for the engine serving `model`. */
export function parseSimRequest(endpoint: SimEndpoint, body: string, model: string): SimParseResult {
  const bad = (message: string): SimParseResult => ({ kind: 'error', code: 'LLMGW_BAD_REQUEST', message });
  let raw: unknown;
  try {
    raw = JSON.parse(body);
  } catch (err) {
    return bad(`request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return bad('request body must be a JSON object');
  const b = raw as Json;
  if (typeof b.model !== 'string' || b.model === '') return bad('model: required, a non-empty string');
  if (b.model !== model) {
    return {
      kind: 'error',
      code: 'LLMGW_UNKNOWN_MODEL',
      message: `model "${b.model}" is not served here; this engine serves "${model}"`,
    };
  }
  const prompt = endpoint === 'chat' ? chatPromptText(b.messages) : singlePrompt(b.prompt);
  if (typeof prompt !== 'string') return bad(prompt.problem);
  const problem = requestProblem(b);
  if (problem) return bad(problem);
  const limit = endpoint === 'chat' ? (b.max_completion_tokens ?? b.max_tokens) : b.max_tokens;
  const maxTokens = limit === undefined || limit === null ? DEFAULT_MAX_TOKENS : limit;
  if (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 0 || maxTokens > MAX_MAX_TOKENS) {
    return bad(`max_tokens: expected an integer from 0 to ${MAX_MAX_TOKENS}, got ${JSON.stringify(limit)}`);
  }
  if (b.stream !== undefined && b.stream !== null && typeof b.stream !== 'boolean')
    return bad('stream: expected a boolean');
  const so = b.stream_options;
  if (so !== undefined && so !== null && (typeof so !== 'object' || Array.isArray(so)))
    return bad('stream_options: expected an object');
  const includeUsage = (so as Json | null | undefined)?.include_usage === true;
  return {
    kind: 'ok',
    request: {
      endpoint,
      model,
      promptText: prompt,
      promptTokens: countWords(prompt),
      maxTokens,
      stream: b.stream === true,
      includeUsage,
    },
  };
}

/** The text of all messages, or what is wrong with them. */
function chatPromptText(messages: unknown): string | { problem: string } {
  if (!Array.isArray(messages) || messages.length === 0) return { problem: 'messages: required, a non-empty array' };
  const parts: string[] = [];
  for (const [i, m] of messages.entries()) {
    if (typeof m !== 'object' || m === null)
      return { problem: `messages[${i}]: expected an object with a string "role"` };
    const role = roleProblem(m as Json, i);
    if (role) return { problem: role };
    const content = (m as Json).content;
    if (typeof content === 'string') parts.push(content);
    else if (Array.isArray(content)) {
      for (const p of content)
        if (typeof p === 'object' && p !== null && typeof (p as Json).text === 'string')
          parts.push((p as Json).text as string);
    } else if (content !== null && content !== undefined) {
      return { problem: `messages[${i}].content: expected a string or an array of content parts` };
    }
  }
  return parts.join('\n');
}

/** The usage object for a request that produced `completionTokens` tokens, `cachedTokens` of its prompt cached. */
export function usageOf(req: SimRequest, completionTokens: number, cachedTokens = 0): Usage {
  return {
    prompt_tokens: req.promptTokens,
    completion_tokens: completionTokens,
    total_tokens: req.promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

/** The non-stream response: `chat.completion` or `text_completion`. */
export function completionBody(req: SimRequest, id: string, created: number, text: string, usage: Usage): Json {
  const finish_reason = 'length';
  const choice =
    req.endpoint === 'chat'
      ? { index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason }
      : { index: 0, text, logprobs: null, finish_reason };
  const object = req.endpoint === 'chat' ? 'chat.completion' : 'text_completion';
  return { id, object, created, model: req.model, choices: [choice], usage };
}

/** One stream chunk; `piece` is the delta text, `role` marks the chat opener, `finish` the last content chunk. */
export function chunkBody(
  req: SimRequest,
  id: string,
  created: number,
  piece: { text: string; role?: boolean; finish?: boolean },
): Json {
  const finish_reason = piece.finish ? 'length' : null;
  const delta = piece.role ? { role: 'assistant', content: piece.text } : piece.finish ? {} : { content: piece.text };
  const choice =
    req.endpoint === 'chat'
      ? { index: 0, delta, logprobs: null, finish_reason }
      : { index: 0, text: piece.text, logprobs: null, finish_reason };
  return { ...chunkHead(req, id, created), choices: [choice], ...(req.includeUsage ? { usage: null } : {}) };
}

/** The extra chunk OpenAI sends before `[DONE]` when `stream_options.include_usage` is set: no choices, just usage. */
export function usageChunk(req: SimRequest, id: string, created: number, usage: Usage): Json {
  return { ...chunkHead(req, id, created), choices: [], usage };
}

function chunkHead(req: SimRequest, id: string, created: number): Json {
  return {
    id,
    object: req.endpoint === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created,
    model: req.model,
  };
}
