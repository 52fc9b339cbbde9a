/** The sim engine's wire format: deterministic replies, usage counts and request errors. */
import {
  chunkBody,
  completionBody,
  countWords,
  DEFAULT_MAX_TOKENS,
  fakeToken,
  parseSimRequest,
  promptSeed,
  usageChunk,
  usageOf,
  type SimRequest,
} from '../../lib/sim/openai';

const MODEL = 'sim-7b';
const ok = (endpoint: 'chat' | 'text', body: unknown): SimRequest => {
  const r = parseSimRequest(endpoint, JSON.stringify(body), MODEL);
  if (r.kind !== 'ok') throw new Error(`expected ok, got ${r.code}: ${r.message}`);
  return r.request;
};
const reply = (prompt: string, n: number): string =>
  Array.from({ length: n }, (_, i) => fakeToken(promptSeed(prompt), i)).join('');

describe('fake tokens', () => {
  it('gives the same prompt the same reply and different prompts different replies', () => {
    expect(reply('hello there', 12)).toBe(reply('hello there', 12));
    expect(reply('hello there', 12)).not.toBe(reply('hello where', 12));
  });

  it('makes n tokens that count as n words, the first without a leading space', () => {
    const text = reply('count me', 25);
    expect(countWords(text)).toBe(25);
    expect(text.startsWith(' ')).toBe(false);
    expect(fakeToken(7, 3).startsWith(' ')).toBe(true);
  });
});

describe('parseSimRequest', () => {
  it('reads a chat request: prompt words, max_completion_tokens over max_tokens, stream options', () => {
    const r = ok('chat', {
      model: MODEL,
      max_tokens: 3,
      max_completion_tokens: 5,
      stream: true,
      stream_options: { include_usage: true },
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: [{ type: 'text', text: 'three more words' }] },
      ],
    });
    expect(r).toEqual({
      endpoint: 'chat',
      model: MODEL,
      promptText: 'be brief\nthree more words',
      promptTokens: 5,
      maxTokens: 5,
      stream: true,
      includeUsage: true,
    });
  });

  it('reads a completions request with a prompt array of one prompt and the default max_tokens', () => {
    const r = ok('text', { model: MODEL, prompt: ['one two three'] });
    expect(r.promptTokens).toBe(3);
    expect(r.maxTokens).toBe(DEFAULT_MAX_TOKENS);
    expect(r.stream).toBe(false);
    expect(r.includeUsage).toBe(false);
  });

  it.each([
    ['malformed JSON', '{"model": ', 'LLMGW_BAD_REQUEST', /not valid JSON/],
    ['a non-object body', '[1]', 'LLMGW_BAD_REQUEST', /JSON object/],
    ['a missing model', '{"messages":[{"role":"user","content":"hi"}]}', 'LLMGW_BAD_REQUEST', /model: required/],
    [
      'another model',
      '{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}',
      'LLMGW_UNKNOWN_MODEL',
      /"gpt-x" is not served here/,
    ],
    ['no messages', `{"model":"${MODEL}","messages":[]}`, 'LLMGW_BAD_REQUEST', /messages: required/],
    [
      'a message without role',
      `{"model":"${MODEL}","messages":[{"content":"x"}]}`,
      'LLMGW_BAD_REQUEST',
      /messages\[0\]/,
    ],
    [
      'a negative max_tokens',
      `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"max_tokens":-1}`,
      'LLMGW_BAD_REQUEST',
      /max_tokens/,
    ],
    [
      'a string stream flag',
      `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"stream":"yes"}`,
      'LLMGW_BAD_REQUEST',
      /stream: expected a boolean/,
    ],
    [
      'n = 2 (one choice only, as llama.cpp)',
      `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"n":2}`,
      'LLMGW_BAD_REQUEST',
      /^n: the sim engine serves one choice/,
    ],
    [
      'n = 1.5',
      `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"n":1.5}`,
      'LLMGW_BAD_REQUEST',
      /^n: expected a whole number/,
    ],
    [
      'a negative temperature',
      `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"temperature":-0.5}`,
      'LLMGW_BAD_REQUEST',
      /^temperature: must be from 0/,
    ],
    [
      'top_p 0',
      `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"top_p":0}`,
      'LLMGW_BAD_REQUEST',
      /^top_p: must be from/,
    ],
    [
      'tools that are not functions',
      `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"tools":[{"type":"code"}]}`,
      'LLMGW_BAD_REQUEST',
      /^tools\[0\]: expected/,
    ],
    [
      'a tool_choice naming no tool',
      `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`,
      'LLMGW_BAD_REQUEST',
      /^tool_choice: names "g", which is not in tools/,
    ],
    [
      'an unknown role',
      `{"model":"${MODEL}","messages":[{"role":"robot","content":"x"}]}`,
      'LLMGW_BAD_REQUEST',
      /^messages\[0\]\.role: expected one of system/,
    ],
    [
      'stream_options without stream',
      `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`,
      'LLMGW_BAD_REQUEST',
      /^stream_options: only allowed with "stream": true/,
    ],
    [
      'a stop that is a number',
      `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"stop":3}`,
      'LLMGW_BAD_REQUEST',
      /^stop: expected a string or an array of strings/,
    ],
  ])('rejects %s', (_name, body, code, message) => {
    const r = parseSimRequest('chat', body, MODEL);
    expect(r.kind).toBe('error');
    if (r.kind === 'error') {
      expect(r.code).toBe(code);
      expect(r.message).toMatch(message);
    }
  });

  it('rejects a completions request without a prompt', () => {
    const r = parseSimRequest('text', JSON.stringify({ model: MODEL }), MODEL);
    expect(r).toMatchObject({
      kind: 'error',
      code: 'LLMGW_BAD_REQUEST',
      message: expect.stringMatching(/prompt: required/),
    });
  });

  it.each([
    [['one', 'two'], /^prompt: the sim engine serves one prompt per request, got 2/],
    [[1, 2, 3], /^prompt: token ids need a tokenizer/],
  ])('refuses a prompt it cannot serve whole: %j', (prompt, message) => {
    expect(parseSimRequest('text', JSON.stringify({ model: MODEL, prompt }), MODEL)).toMatchObject({
      kind: 'error',
      code: 'LLMGW_BAD_REQUEST',
      message: expect.stringMatching(message),
    });
  });
});

describe('response shapes', () => {
  const chat = ok('chat', {
    model: MODEL,
    messages: [{ role: 'user', content: 'a b c' }],
    max_tokens: 4,
    stream: true,
    stream_options: { include_usage: true },
  });
  const text = ok('text', { model: MODEL, prompt: 'a b', max_tokens: 2 });

  it('counts usage from prompt words and produced tokens', () => {
    expect(usageOf(chat, 4)).toEqual({
      prompt_tokens: 3,
      completion_tokens: 4,
      total_tokens: 7,
      prompt_tokens_details: { cached_tokens: 0 },
    });
    expect(usageOf(chat, 4, 2).prompt_tokens_details).toEqual({ cached_tokens: 2 });
  });

  it('builds chat.completion and text_completion bodies', () => {
    const c = completionBody({ ...chat, stream: false }, 'chatcmpl-1', 1, 'x y', usageOf(chat, 2));
    expect(c).toMatchObject({
      object: 'chat.completion',
      model: MODEL,
      choices: [{ message: { role: 'assistant', content: 'x y' }, finish_reason: 'length' }],
    });
    const t = completionBody(text, 'cmpl-1', 1, 'x y', usageOf(text, 2));
    expect(t).toMatchObject({
      object: 'text_completion',
      choices: [{ text: 'x y' }],
      usage: { prompt_tokens: 2, completion_tokens: 2, total_tokens: 4 },
    });
  });

  it('builds stream chunks: role opener, content deltas, finish, then a usage-only chunk', () => {
    expect(chunkBody(chat, 'id', 1, { text: '', role: true })).toMatchObject({
      object: 'chat.completion.chunk',
      choices: [{ delta: { role: 'assistant' } }],
      usage: null,
    });
    expect(chunkBody(chat, 'id', 1, { text: ' w' })).toMatchObject({
      choices: [{ delta: { content: ' w' }, finish_reason: null }],
    });
    expect(chunkBody(chat, 'id', 1, { text: '', finish: true })).toMatchObject({
      choices: [{ delta: {}, finish_reason: 'length' }],
    });
    expect(usageChunk(chat, 'id', 1, usageOf(chat, 4))).toMatchObject({ choices: [], usage: { total_tokens: 7 } });
    expect(chunkBody(text, 'id', 1, { text: ' w' })).not.toHaveProperty('usage');
  });
});
