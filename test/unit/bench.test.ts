/** `llmgw bench`'s pure parts: statistics, stream token timing, the synthetic prompt, the report and the progress line. */
import { formatReport, progressLine } from '../../cli/bench-view';
import { requestBodies } from '../../lib/bench/prompt';
import type { Outcome } from '../../lib/bench/request';
import { completionsUrl, modelsUrl, newTally, record, reportOf, type BenchOptions } from '../../lib/bench/run';
import { StreamReader } from '../../lib/bench/sse';
import { medianCi95, pairedDifferences, quantile, summarize } from '../../lib/bench/stats';
import { countWords, parseSimRequest } from '../../lib/sim/openai';

const event = (obj: unknown): string => `data: ${JSON.stringify(obj)}\n\n`;
const delta = (content: string, role?: string): unknown => ({
  choices: [{ index: 0, delta: { ...(role ? { role } : {}), content }, finish_reason: null }],
});

describe('statistics', () => {
  test('quantiles interpolate, summaries hold p50/p90/p99/mean/max, an empty sample has none', () => {
    expect(quantile([4, 1, 3, 2], 0.5)).toBe(2.5);
    expect(quantile([1, 2, 3, 4, 5], 0.9)).toBeCloseTo(4.6);
    const s = summarize(Array.from({ length: 100 }, (_, i) => i + 1));
    expect(s).toMatchObject({ n: 100, mean: 50.5, p50: 50.5, max: 100 });
    expect(s?.p99).toBeCloseTo(99.01);
    expect(summarize([])).toBeNull();
  });

  test('the bootstrap interval holds the median, is the same for the same seed, and narrows with more data', () => {
    const xs = Array.from({ length: 400 }, (_, i) => Math.sin(i) * 3 + 10);
    const [lo, hi] = medianCi95(xs, 500);
    expect(lo).toBeLessThanOrEqual(quantile(xs, 0.5));
    expect(hi).toBeGreaterThanOrEqual(quantile(xs, 0.5));
    expect(medianCi95(xs, 500)).toEqual([lo, hi]);
    const [lo2, hi2] = medianCi95(xs.slice(0, 40), 500);
    expect(hi2 - lo2).toBeGreaterThan(hi - lo);
  });

  test('paired differences skip the rounds either path failed', () => {
    expect(pairedDifferences([3, Number.NaN, 5, 7], [1, 1, Number.NaN, 2])).toEqual([2, 5]);
  });
});

describe('stream token timing', () => {
  test('times tokens across chunk borders and CRLF; the role opener is not a token; usage and [DONE] are read', () => {
    const r = new StreamReader();
    const body =
      event(delta('', 'assistant')) +
      event(delta('Hel')) +
      event(delta('lo')) +
      event({ choices: [{ index: 0, delta: {}, finish_reason: 'length' }] }) +
      event({ choices: [], usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 } }) +
      'data: [DONE]\n\n';
    const cut = body.indexOf('lo"') + 1;
    r.push(body.slice(0, 20).replace(/\n/g, '\r\n'), 1);
    r.push(body.slice(20, cut), 5);
    r.push(body.slice(cut), 12);
    expect(r.firstTokenAt).toBe(5);
    expect(r.gaps).toEqual([7]);
    expect(r.tokenEvents).toBe(2);
    expect(r.usage).toEqual({ promptTokens: 7, completionTokens: 2 });
    expect(r.done).toBe(true);
    expect(r.error).toBeNull();
  });

  test('a completions stream counts its text; an error event is kept; comments are skipped', () => {
    const r = new StreamReader();
    r.push(
      `: keep-alive\n\n${event({ choices: [{ text: 'a' }] })}${event({ error: { message: 'replica gone', code: 'LLMGW_UPSTREAM_FAILED' } })}data: [DONE]\n\n`,
      3,
    );
    expect(r.tokenEvents).toBe(1);
    expect(r.error).toBe('replica gone');
  });
});

describe('the synthetic request', () => {
  const opts = { model: 'm', promptTokens: 50, maxTokens: 4, stream: true };

  test('its prompt is exactly N tokens to the sim engine, asks for the usage when streamed, and differs per request', () => {
    const body = requestBodies(opts);
    const parsed = parseSimRequest('chat', body(17), 'm');
    expect(parsed).toMatchObject({
      kind: 'ok',
      request: { promptTokens: 50, maxTokens: 4, stream: true, includeUsage: true },
    });
    expect(body(1)).not.toBe(body(2));
    expect((JSON.parse(body(3)) as { messages: { content: string }[] }).messages[0].content.startsWith('3 ')).toBe(
      true,
    );
    expect(
      countWords(
        (JSON.parse(requestBodies({ ...opts, promptTokens: 1 })(9)) as { messages: { content: string }[] }).messages[0]
          .content,
      ),
    ).toBe(1);
    expect(JSON.parse(requestBodies({ ...opts, stream: false, ignoreEos: true })(1))).toMatchObject({
      max_tokens: 4,
      ignore_eos: true,
    });
    expect(JSON.parse(requestBodies({ ...opts, stream: false })(1))).not.toHaveProperty('stream');
  });

  test('a base URL, …/v1 or the full path all give the chat completions URL; models sits beside it', () => {
    for (const base of ['http://h:8080', 'http://h:8080/', 'http://h:8080/v1', 'http://h:8080/v1/chat/completions']) {
      expect(completionsUrl(base).href).toBe('http://h:8080/v1/chat/completions');
    }
    expect(completionsUrl('https://h/api/v1').href).toBe('https://h/api/v1/chat/completions');
    expect(modelsUrl(completionsUrl('http://h:8080')).href).toBe('http://h:8080/v1/models');
  });
});

describe('the report', () => {
  const options: BenchOptions = {
    url: new URL('http://h/v1/chat/completions'),
    model: 'm',
    concurrency: 2,
    requests: 4,
    durationS: null,
    stream: true,
    promptTokens: 8,
    maxTokens: 3,
    ignoreEos: false,
    timeoutMs: 1000,
    warmup: 0,
    ttftBudgetMs: 50,
  };
  const ok = (ttft: number, total: number): Outcome => ({
    ok: true,
    status: 200,
    kind: null,
    message: null,
    start: 0,
    ttfb: 1,
    ttft,
    total,
    promptTokens: 8,
    completionTokens: 3,
    gaps: [2, 4],
  });
  const failed = (kind: string, message: string): Outcome => ({ ...ok(0, 5), ok: false, kind, message });

  test('counts rates over the duration, goodput within the TTFT budget, and failures by kind with the first few messages', () => {
    const t = newTally();
    for (const o of [
      ok(10, 20),
      ok(40, 60),
      ok(80, 90),
      failed('HTTP 503', 'no ready replica'),
      failed('HTTP 503', 'again'),
      failed('timeout', 'no data'),
      failed('HTTP 503', 'a third'),
      failed('HTTP 503', 'a fourth'),
    ])
      record(t, o);
    const r = reportOf(options, t, 2, 0.5);
    expect(r.requests).toEqual({ sent: 8, ok: 3, failed: 5 });
    expect(r.requestsPerS).toBe(1.5);
    expect(r.tokens).toEqual({ prompt: 24, completion: 9, completionPerS: 4.5, promptPerS: 12 });
    expect(r.goodput).toEqual({ ttftBudgetMs: 50, requests: 2, perS: 1, shareOfOk: 2 / 3 });
    expect(r.ttftMs?.p50).toBe(40);
    expect(r.itlMs).toMatchObject({ n: 6, p50: 3 });
    expect(r.errors).toEqual([
      { kind: 'HTTP 503', count: 4, first: ['no ready replica', 'again', 'a third'] },
      { kind: 'timeout', count: 1, first: ['no data'] },
    ]);
    const text = formatReport(r);
    expect(text).toMatch(/3 ok, 5 failed; 1\.5 completed\/s/);
    expect(text).toMatch(/goodput +1\.0 req\/s with TTFT ≤ 50 ms \(66\.7 % of completed\)/);
    expect(text).toMatch(/ITL +3\.00/);
    expect(text).toMatch(/4× HTTP 503\n +no ready replica/);
  });

  test('not streamed: TTFT is the whole answer and there is no ITL row', () => {
    const t = newTally();
    record(t, ok(30, 30));
    const r = reportOf({ ...options, stream: false }, t, 1, 0.99);
    expect(r.itlMs).toBeNull();
    expect(formatReport(r)).toMatch(/TTFT \(whole answer\)/);
    expect(formatReport(r)).not.toMatch(/ITL/);
    expect(formatReport(r)).toMatch(/99 % of one core: the load generator may be the limit/);
  });
});

describe('the progress line', () => {
  test('a bar on a terminal, a plain line elsewhere, by requests or by time', () => {
    const p = { done: 50, ok: 49, failed: 1, elapsedS: 2, goal: { requests: 100 }, warmingUp: false };
    expect(progressLine(p, true)).toBe('[############............] 50/100  25 req/s  1 failed');
    expect(progressLine(p, false)).toBe('bench: 50/100, 25 req/s, 1 failed (50 %)');
    expect(progressLine({ ...p, goal: { seconds: 8 } }, false)).toBe('bench: 50 in 2/8 s, 25 req/s, 1 failed (25 %)');
    expect(progressLine({ ...p, warmingUp: true }, false)).toBe('bench: warming up, 50 requests');
  });
});
