/** The real sim-engine process: OpenAI API on one node, a 2-rank group that waits for and dies with its worker. */
import { spawn, type ChildProcess } from 'node:child_process';
import OpenAI from 'openai';
import { simEngineArgv } from '../../lib/sim/argv';
import { fakeToken, promptSeed } from '../../lib/sim/openai';
import { freePort } from '../helpers/ports';
import { parsePromText, valueOf } from '../helpers/prom-text';
import { waitFor } from '../helpers/wait';

const MODEL = 'sim-7b';

interface Proc {
  child: ChildProcess;
  stderr(): string;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const procs: Proc[] = [];

/** Spawns the engine exactly as an agent does, from a foreign cwd. */
function engine(args: string[]): Proc {
  const [cmd, ...pre] = simEngineArgv();
  const child = spawn(cmd, [...pre, ...args], { cwd: '/tmp', stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr?.on('data', (b: Buffer) => void (err += b.toString()));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.once('exit', (code, signal) => r({ code, signal })),
  );
  const p = { child, stderr: () => err, exit };
  procs.push(p);
  return p;
}

/** Resolves the exit within `ms`, or fails naming what was expected. */
async function exitOf(
  p: Proc,
  ms: number,
  what: string,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>(
    (_, rej) =>
      (timer = setTimeout(
        () => rej(new Error(`timed out after ${ms}ms waiting for ${what}; stderr:\n${p.stderr()}`)),
        ms,
      )),
  );
  try {
    return await Promise.race([p.exit, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

const health = async (port: number): Promise<number> =>
  (await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(1000) })).status;
const post = (port: number, path: string, body: unknown): Promise<Response> =>
  fetch(`http://127.0.0.1:${port}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
const reply = (prompt: string, n: number): string =>
  Array.from({ length: n }, (_, i) => fakeToken(promptSeed(prompt), i)).join('');

afterEach(async () => {
  for (const p of procs.splice(0)) {
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    await p.exit;
  }
});

describe('sim engine, single node', () => {
  let port: number;
  beforeEach(async () => {
    port = await freePort();
    engine([
      '--model',
      MODEL,
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
      '--rank',
      '0',
      '--world',
      '1',
      '--dist-host',
      '127.0.0.1',
      '--dist-port',
      '0',
      '--tokens-per-second',
      '0',
    ]);
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 15_000, what: `health 200 on :${port}` });
  });

  it('lists its model and streams a chat completion to the openai client, with usage', async () => {
    const models = (await (await fetch(`http://127.0.0.1:${port}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toEqual([MODEL]);
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'tell me four things' }],
      max_tokens: 6,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: unknown;
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(reply('tell me four things', 6));
    expect(finish).toBe('length');
    expect(usage).toEqual({
      prompt_tokens: 4,
      completion_tokens: 6,
      total_tokens: 10,
      prompt_tokens_details: { cached_tokens: 0 },
    });
  });

  it('answers a non-stream chat with the same deterministic text, and completions with usage', async () => {
    const chat = await post(port, '/v1/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: 'tell me four things' }],
      max_tokens: 6,
    });
    expect(chat.status).toBe(200);
    const c = (await chat.json()) as { object: string; choices: { message: { content: string } }[]; usage: unknown };
    expect(c.object).toBe('chat.completion');
    expect(c.choices[0].message.content).toBe(reply('tell me four things', 6));
    expect(c.usage).toEqual({
      prompt_tokens: 4,
      completion_tokens: 6,
      total_tokens: 10,
      prompt_tokens_details: { cached_tokens: 0 },
    });

    const text = (await (
      await post(port, '/v1/completions', { model: MODEL, prompt: 'once upon', max_tokens: 3 })
    ).json()) as { choices: { text: string }[]; usage: unknown };
    expect(text.choices[0].text).toBe(reply('once upon', 3));
    expect(text.usage).toEqual({
      prompt_tokens: 2,
      completion_tokens: 3,
      total_tokens: 5,
      prompt_tokens_details: { cached_tokens: 0 },
    });

    const sse = await (
      await post(port, '/v1/completions', { model: MODEL, prompt: 'once upon', max_tokens: 3, stream: true })
    ).text();
    const events = sse.split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    const pieces = events
      .slice(0, -1)
      .map((e) => (JSON.parse(e.slice('data: '.length)) as { choices: { text: string }[] }).choices[0].text);
    expect(pieces.join('')).toBe(reply('once upon', 3));
  });

  it('answers 404 for another model and 400 for malformed JSON, in the OpenAI error shape', async () => {
    const unknown = await post(port, '/v1/chat/completions', {
      model: 'gpt-x',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({
      error: { code: 'LLMGW_UNKNOWN_MODEL', message: expect.stringContaining('gpt-x') },
    });
    const bad = await post(port, '/v1/completions', '{"model": ');
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { code: 'LLMGW_BAD_REQUEST', type: 'invalid_request_error' } });
  });

  it('refuses what a real engine refuses (n, temperature, tools, roles, prompt arrays) and says it serves no embeddings', async () => {
    const chat = (extra: Record<string, unknown>): Record<string, unknown> => ({
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      ...extra,
    });
    for (const [path, body, message] of [
      [
        '/v1/chat/completions',
        chat({ n: 2 }),
        'n: the sim engine serves one choice per request (n = 1), as llama.cpp does; got 2',
      ],
      ['/v1/chat/completions', chat({ n: 'two' }), 'n: expected a whole number, got "two"'],
      ['/v1/chat/completions', chat({ temperature: 'hot' }), 'temperature: expected a number, got "hot"'],
      ['/v1/chat/completions', chat({ tools: 'x' }), 'tools: expected an array, got string'],
      [
        '/v1/chat/completions',
        chat({ messages: [{ role: 'bogus', content: 'hi' }] }),
        'messages[0].role: expected one of system, developer, user, assistant, tool, function, got "bogus"',
      ],
      [
        '/v1/completions',
        { model: MODEL, prompt: ['a', 'b'] },
        'prompt: the sim engine serves one prompt per request, got 2: send them one by one',
      ],
      [
        '/v1/completions',
        { model: MODEL, prompt: [1, 2, 3] },
        'prompt: token ids need a tokenizer, and the sim engine has none: send the prompt as text',
      ],
    ] as const) {
      const r = await post(port, path, body);
      expect({ path, status: r.status, body: await r.json() }).toEqual({
        path,
        status: 400,
        body: { error: { code: 'LLMGW_BAD_REQUEST', type: 'invalid_request_error', message } },
      });
    }
    const embed = await post(port, '/v1/embeddings', { model: MODEL, input: 'hi' });
    expect({ status: embed.status, body: await embed.json() }).toMatchObject({
      status: 400,
      body: { error: { code: 'LLMGW_ENDPOINT_UNSUPPORTED' } },
    });
  });
});

describe('sim engine, prefix cache and prefill', () => {
  const SYSTEM = Array.from({ length: 400 }, (_, i) => `w${i % 50}`).join(' ');
  const ask = (port: number, question: string): Promise<Response> =>
    post(port, '/v1/chat/completions', {
      model: MODEL,
      messages: [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: question },
      ],
      max_tokens: 1,
    });
  const cachedOf = async (r: Response): Promise<number> =>
    ((await r.json()) as { usage: { prompt_tokens_details: { cached_tokens: number } } }).usage.prompt_tokens_details
      .cached_tokens;

  it('reuses a shared prefix (cached_tokens), prefills the rest one prompt at a time, and says so as vLLM', async () => {
    const port = await freePort();
    // 2,000 tokens/s: a 400-word prompt takes 200 ms uncached; the cache holds 1,024 tokens.
    engine(
      ['--model', MODEL, '--port', String(port), '--tokens-per-second', '0'].concat([
        '--prefill-tokens-per-second',
        '2000',
        '--prefix-cache-tokens',
        '1024',
      ]),
    );
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 15_000, what: `health 200 on :${port}` });

    const t0 = Date.now();
    const first = await ask(port, 'what is one');
    expect(first.status).toBe(200);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(195);
    expect(await cachedOf(first)).toBe(0);
    // The 400 system words are 25 whole blocks of 16: all reused by another question.
    expect(await cachedOf(await ask(port, 'and what is two'))).toBe(400);

    // Three new prompts at once: one prefills, two wait for it.
    const others = ['x', 'y', 'z'].map((p) =>
      post(port, '/v1/completions', { model: MODEL, prompt: `${p} ${SYSTEM}`, max_tokens: 1 }),
    );
    await new Promise((r) => setTimeout(r, 60));
    const m = parsePromText(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text());
    expect(valueOf(m, 'vllm:num_requests_waiting', { model_name: MODEL })).toBe(2);
    expect(valueOf(m, 'vllm:num_requests_running', { model_name: MODEL })).toBe(1);
    expect(valueOf(m, 'vllm:gpu_cache_usage_perc')).toBeGreaterThan(0);
    expect(valueOf(m, 'vllm:gpu_cache_usage_perc')).toBeLessThanOrEqual(1);
    expect((await Promise.all(others)).map((r) => r.status)).toEqual([200, 200, 200]);
    const after = parsePromText(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text());
    expect(valueOf(after, 'vllm:num_requests_waiting')).toBe(0);
    expect(valueOf(after, 'vllm:prefix_cache_hits_total')).toBe(400);
    expect(valueOf(after, 'vllm:prefix_cache_queries_total')).toBeGreaterThan(1600);
  });
});

describe('sim engine process', () => {
  it('finishes an in-flight stream on SIGTERM, then exits 0', async () => {
    const port = await freePort();
    const p = engine(['--model', MODEL, '--port', String(port), '--tokens-per-second', '20']);
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 15_000, what: 'health 200' });
    const res = await post(port, '/v1/completions', { model: MODEL, prompt: 'slow', max_tokens: 10, stream: true });
    expect(res.status).toBe(200);
    p.child.kill('SIGTERM');
    const body = await res.text();
    expect(body.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(await exitOf(p, 15_000, 'exit after SIGTERM')).toEqual({ code: 0, signal: null });
  });

  it('exits 2 naming a bad flag', async () => {
    const p = engine(['--model', MODEL, '--port', 'eighty']);
    expect((await exitOf(p, 15_000, 'exit on a bad flag')).code).toBe(2);
    expect(p.stderr()).toMatch(/--port: expected an integer/);
    expect(p.stderr()).toMatch(/usage: sim-engine/);
  });
});

describe('sim engine, 2-rank group', () => {
  it('serves only once rank 1 joined, and exits 3 naming the rank when rank 1 is killed', async () => {
    const [port, dist] = [await freePort(), await freePort()];
    const group = ['--world', '2', '--dist-host', '127.0.0.1', '--dist-port', String(dist), '--tokens-per-second', '0'];
    const rank0 = engine(['--model', MODEL, '--host', '127.0.0.1', '--port', String(port), '--rank', '0', ...group]);
    await waitFor(async () => (await health(port)) === 503, {
      timeoutMs: 15_000,
      what: 'rank 0 health 503 before rank 1 exists',
    });
    const waiting = await fetch(`http://127.0.0.1:${port}/health`);
    expect(await waiting.json()).toMatchObject({ status: 'waiting', joined: 0, world: 2 });
    const refused = await post(port, '/v1/completions', { model: MODEL, prompt: 'x' });
    expect(refused.status).toBe(503);
    expect(await refused.json()).toMatchObject({ error: { code: 'LLMGW_NO_READY_REPLICA' } });
    await new Promise((r) => setTimeout(r, 2000));
    expect(await health(port)).toBe(503); // still waiting just before the worker is spawned

    const rank1 = engine(['--model', MODEL, '--port', '0', '--rank', '1', ...group]);
    await waitFor(async () => (await health(port)) === 200, {
      timeoutMs: 15_000,
      what: 'rank 0 health 200 after rank 1 joined',
    });
    expect((await post(port, '/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2 })).status).toBe(200);

    rank1.child.kill('SIGKILL');
    await waitFor(async () => (await health(port).catch(() => 0)) !== 200, {
      timeoutMs: 10_000,
      what: 'rank 0 to stop serving after rank 1 died',
    });
    expect(await exitOf(rank0, 10_000, 'rank 0 to exit after rank 1 died')).toEqual({ code: 3, signal: null });
    expect(rank0.stderr()).toMatch(/rank 1 left the group/);
  });

  it('ends a worker with code 3 when rank 0 goes away', async () => {
    const dist = await freePort();
    const group = ['--world', '2', '--dist-host', '127.0.0.1', '--dist-port', String(dist), '--tokens-per-second', '0'];
    const rank0 = engine(['--model', MODEL, '--port', String(await freePort()), '--rank', '0', ...group]);
    const rank1 = engine(['--model', MODEL, '--rank', '1', ...group]);
    await waitFor(() => rank0.stderr().includes('"group ready"'), {
      timeoutMs: 15_000,
      what: 'rank 0 to log "group ready"',
    });
    rank0.child.kill('SIGKILL');
    expect(await exitOf(rank1, 10_000, 'rank 1 to exit after rank 0 died')).toEqual({ code: 3, signal: null });
    expect(rank1.stderr()).toMatch(/rank 0 left the group/);
  });
});
