/**
 * What the gateway checks of an inference request before it routes it: the body is one JSON object no deeper than
 * MAX_DEPTH, with a string `model`, and the top-level fields the OpenAI API defines have their types (from each
 * value's first byte: no value is built but the few small ones checked further). A request an engine would refuse
 * is refused here once, in the gateway's words, instead of being tried on every replica (llama.cpp answers
 * `tools: "x"` with a 500, which looked like a replica failure).
 */
import { quoteInput } from '../../lib/errors';
import { scanJsonObject, sliceValue, type JsonKind, type JsonSlice } from './json-scan';

/** The inference endpoints the gateway forwards. */
export const PROXIED = ['/v1/chat/completions', '/v1/completions', '/v1/embeddings'] as const;
/** One of PROXIED. */
export type ProxiedPath = (typeof PROXIED)[number];

/** Deepest nesting accepted: far beyond any tool schema, and a nesting bomb is refused at its 129th byte. */
export const MAX_DEPTH = 128;
/** Largest `tools` array checked, bytes: hundreds of tool definitions; bigger is refused. */
const MAX_TOOLS_BYTES = 1024 * 1024;

/** The outcome: the model to route by, or what is wrong (a LLMGW_BAD_REQUEST message). */
export type CheckResult =
  | {
      kind: 'ok';
      model: string;
      /** max_tokens or max_completion_tokens when given (quota estimates) */ maxTokens: number | null;
      /** Where `messages` (chat) or `prompt` (completions) is in the body: affinity routing hashes its start */
      prompt?: JsonSlice;
      /** Where `user` is in the body (session affinity) */
      user?: JsonSlice;
    }
  | { kind: 'error'; message: string };

interface FieldRule {
  kinds: readonly JsonKind[];
  /** as a message says it: "a whole number from 1 to 128" */
  what: string;
  required?: boolean;
  /** a further check of the parsed value: the problem, or null */
  check?: (v: unknown, body: Buffer, s: JsonSlice) => string | null;
}

const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const range =
  (min: number, max: number, whole = false) =>
  (v: unknown): string | null =>
    v === null || (isNum(v) && v >= min && v <= max && (!whole || Number.isInteger(v)))
      ? null
      : `expected ${whole ? 'a whole number' : 'a number'} ${max === Infinity ? `of at least ${min}` : `from ${min} to ${max}`}, got ${typeof v === 'number' ? v : quoteInput(v, 24)}`;
const nonEmpty = (_v: unknown, body: Buffer, s: JsonSlice): string | null => {
  let i = s.start + 1;
  while (body[i] === 0x20 || body[i] === 0x0a || body[i] === 0x0d || body[i] === 0x09) i++;
  return i === s.end - 1 ? 'must not be empty' : null;
};
const checkTools = (v: unknown): string | null => {
  if (v === null) return null;
  for (const [i, t] of (v as unknown[]).entries()) {
    const fn = (t as { function?: { name?: unknown } } | null)?.function;
    if (
      typeof t !== 'object' ||
      t === null ||
      Array.isArray(t) ||
      (t as { type?: unknown }).type !== 'function' ||
      typeof fn !== 'object' ||
      fn === null ||
      typeof fn.name !== 'string'
    ) {
      return `[${i}]: expected {"type": "function", "function": {"name": …}}`;
    }
  }
  return null;
};

const STR = { kinds: ['string'], what: 'a string' } as const;
const NUM = { kinds: ['number', 'null'], what: 'a number' } as const;
const BOOL = { kinds: ['boolean', 'null'], what: 'true or false' } as const;
const OBJ = { kinds: ['object', 'null'], what: 'an object' } as const;
const WHOLE = (min: number, max: number): FieldRule => ({
  kinds: ['number', 'null'],
  what: `a whole number from ${min} to ${max}`,
  check: range(min, max, true),
});

const COMMON: Record<string, FieldRule> = {
  model: { ...STR, required: true },
  user: { kinds: ['string', 'null'], what: 'a string' },
};
const GENERATION: Record<string, FieldRule> = {
  ...COMMON,
  stream: BOOL,
  stream_options: OBJ,
  n: WHOLE(1, 128),
  temperature: { ...NUM, check: range(0, Infinity) },
  top_p: { ...NUM, check: range(0, 1) },
  presence_penalty: { ...NUM, check: range(-2, 2) },
  frequency_penalty: { ...NUM, check: range(-2, 2) },
  max_tokens: WHOLE(0, 2 ** 31 - 1),
  seed: { ...NUM, check: range(-(2 ** 63), 2 ** 64, true) },
  stop: { kinds: ['string', 'array', 'null'], what: 'a string or an array of strings' },
  logit_bias: OBJ,
};

const RULES: Record<ProxiedPath, Record<string, FieldRule>> = {
  '/v1/chat/completions': {
    ...GENERATION,
    messages: { kinds: ['array'], what: 'an array of messages', required: true, check: nonEmpty },
    max_completion_tokens: WHOLE(0, 2 ** 31 - 1),
    tools: {
      kinds: ['array', 'null'],
      what: 'an array of tools',
      check: (_v, body, s) =>
        s.end - s.start > MAX_TOOLS_BYTES
          ? `more than ${MAX_TOOLS_BYTES} bytes of tool definitions`
          : checkTools(sliceValue(body, s)),
    },
    tool_choice: { kinds: ['string', 'object', 'null'], what: '"none", "auto", "required" or an object' },
    parallel_tool_calls: BOOL,
    response_format: OBJ,
    logprobs: BOOL,
    top_logprobs: WHOLE(0, 20),
  },
  '/v1/completions': {
    ...GENERATION,
    prompt: { kinds: ['string', 'array'], what: 'a string or an array', required: true },
    echo: BOOL,
    suffix: { kinds: ['string', 'null'], what: 'a string' },
    best_of: WHOLE(1, 128),
    logprobs: WHOLE(0, 20),
  },
  '/v1/embeddings': {
    ...COMMON,
    input: { kinds: ['string', 'array'], what: 'a string or an array', required: true },
    encoding_format: {
      kinds: ['string', 'null'],
      what: '"float" or "base64"',
      check: (v) =>
        v === null || v === 'float' || v === 'base64' ? null : `expected "float" or "base64", got ${quoteInput(v, 24)}`,
    },
    dimensions: WHOLE(1, 1 << 20),
  },
};
const KEYS = Object.fromEntries(Object.entries(RULES).map(([p, r]) => [p, new Set(Object.keys(r))])) as Record<
  ProxiedPath,
  Set<string>
>;
const REQUIRED = Object.fromEntries(
  Object.entries(RULES).map(([p, r]) => [p, Object.entries(r).filter(([, f]) => f.required)]),
) as Record<ProxiedPath, [string, FieldRule][]>;
const KIND_TEXT: Record<JsonKind, string> = {
  object: 'an object',
  array: 'an array',
  string: 'a string',
  number: 'a number',
  boolean: 'a boolean',
  null: 'null',
};

/** Checks a request body for `path`; returns the model it names or the problem, naming the field. */
export function checkRequest(path: ProxiedPath, body: Buffer): CheckResult {
  if (body.length === 0)
    return { kind: 'error', message: 'the request body is empty: send a JSON object with a "model" field' };
  const scan = scanJsonObject(body, KEYS[path], MAX_DEPTH);
  if (scan.kind === 'error') return scan;
  const rules = RULES[path];
  for (const [name, rule] of REQUIRED[path]) {
    if (!scan.fields.has(name)) return { kind: 'error', message: `${name}: required, ${rule.what}` };
  }
  for (const [name, s] of scan.fields) {
    const rule = rules[name] as FieldRule;
    if (!rule.kinds.includes(s.kind))
      return { kind: 'error', message: `${name}: expected ${rule.what}, got ${KIND_TEXT[s.kind]}` };
    const problem = rule.check?.(
      s.kind === 'number' || s.kind === 'string' ? sliceValue(body, s) : s.kind === 'null' ? null : undefined,
      body,
      s,
    );
    if (problem) return { kind: 'error', message: `${name}: ${problem}` };
  }
  const model = sliceValue(body, scan.fields.get('model') as JsonSlice) as string;
  if (model === '') return { kind: 'error', message: 'model: required, a non-empty string' };
  const max = scan.fields.get('max_tokens') ?? scan.fields.get('max_completion_tokens');
  const maxTokens = max?.kind === 'number' ? (sliceValue(body, max) as number) : null;
  const prompt = scan.fields.get(path === '/v1/chat/completions' ? 'messages' : 'prompt');
  return { kind: 'ok', model, maxTokens, prompt, user: scan.fields.get('user') };
}
