/**
 * What the sim engine refuses in a request, as the real engines do (vLLM's request models, llama.cpp's parser), so
 * a test against the sim catches what production would: the types and ranges of the sampling fields, tools and
 * tool_choice, message roles, stream_options without stream. What the sim cannot serve as an engine would — more
 * than one choice (n > 1, as llama.cpp), more than one prompt, token-id prompts — is refused, never half served.
 */

type Json = Record<string, unknown>;

/** The roles vLLM's chat template accepts. */
export const SIM_ROLES = ['system', 'developer', 'user', 'assistant', 'tool', 'function'] as const;

const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const absent = (v: unknown): boolean => v === undefined || v === null;

/** A number field in [min, max] (whole when asked), or what is wrong with it. */
function numberField(b: Json, name: string, min: number, max: number, whole = false): string | null {
  const v = b[name];
  if (absent(v)) return null;
  if (!isNum(v) || (whole && !Number.isInteger(v)))
    return `${name}: expected ${whole ? 'a whole number' : 'a number'}, got ${JSON.stringify(v)?.slice(0, 40)}`;
  if (v < min || v > max) return `${name}: must be from ${min} to ${max}, got ${v}`;
  return null;
}

/** What is wrong with `tools` and `tool_choice`, or null. */
function toolsProblem(b: Json): string | null {
  const tools = b.tools;
  if (!absent(tools)) {
    if (!Array.isArray(tools)) return `tools: expected an array, got ${typeof tools}`;
    for (const [i, t] of tools.entries()) {
      const fn = (t as Json | null)?.function as Json | undefined;
      if (
        typeof t !== 'object' ||
        t === null ||
        (t as Json).type !== 'function' ||
        typeof fn !== 'object' ||
        fn === null ||
        typeof fn.name !== 'string'
      ) {
        return `tools[${i}]: expected {"type": "function", "function": {"name": …}}`;
      }
    }
  }
  const choice = b.tool_choice;
  if (absent(choice) || choice === 'none' || choice === 'auto' || choice === 'required') return null;
  const named = (choice as Json | null)?.function as Json | undefined;
  if (typeof choice !== 'object' || typeof named?.name !== 'string')
    return 'tool_choice: expected "none", "auto", "required" or {"type": "function", "function": {"name": …}}';
  if (!Array.isArray(tools) || !tools.some((t) => ((t as Json).function as Json).name === named.name))
    return `tool_choice: names ${JSON.stringify(named.name).slice(0, 40)}, which is not in tools`;
  return null;
}

/** The problem with a request's fields beyond the prompt (the sampling fields, tools, stream_options), or null. */
export function requestProblem(b: Json): string | null {
  const n = numberField(b, 'n', 1, 128, true);
  if (n) return n;
  if (!absent(b.n) && b.n !== 1)
    return `n: the sim engine serves one choice per request (n = 1), as llama.cpp does; got ${String(b.n)}`;
  const problem =
    numberField(b, 'temperature', 0, Number.MAX_VALUE) ??
    numberField(b, 'top_p', Number.MIN_VALUE, 1) ??
    numberField(b, 'presence_penalty', -2, 2) ??
    numberField(b, 'frequency_penalty', -2, 2) ??
    numberField(b, 'seed', -(2 ** 63), 2 ** 64, true);
  if (problem) return problem;
  const stop = b.stop;
  if (!absent(stop) && typeof stop !== 'string' && !(Array.isArray(stop) && stop.every((s) => typeof s === 'string')))
    return 'stop: expected a string or an array of strings';
  if (!absent(b.stream_options) && b.stream !== true) return 'stream_options: only allowed with "stream": true';
  return toolsProblem(b);
}

/** The problem with a chat message's role, or null. */
export function roleProblem(m: Json, i: number): string | null {
  if (typeof m.role !== 'string') return `messages[${i}]: expected an object with a string "role"`;
  return (SIM_ROLES as readonly string[]).includes(m.role)
    ? null
    : `messages[${i}].role: expected one of ${SIM_ROLES.join(', ')}, got ${JSON.stringify(m.role).slice(0, 40)}`;
}

/** The one prompt of a completions request, or what is wrong with it. */
export function singlePrompt(prompt: unknown): string | { problem: string } {
  if (typeof prompt === 'string') return prompt;
  if (!Array.isArray(prompt) || prompt.length === 0)
    return { problem: 'prompt: required, a string or a non-empty array of strings' };
  if (prompt.some((p) => typeof p !== 'string'))
    return { problem: 'prompt: token ids need a tokenizer, and the sim engine has none: send the prompt as text' };
  if (prompt.length > 1)
    return {
      problem: `prompt: the sim engine serves one prompt per request, got ${prompt.length}: send them one by one`,
    };
  return prompt[0] as string;
}
