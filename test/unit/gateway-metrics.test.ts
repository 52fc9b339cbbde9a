/** The gateway's /metrics on its own listener, parsed as Prometheus text, moving with the requests it serves. */
import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import type { RouteRows } from '../../lib/store/store';
import { chat, chunk, closeAll, completion, gateway, post, ready, sleep, upstream } from '../helpers/gateway';
import { freePort } from '../helpers/ports';
import { scrape, undocumented, valueOf } from '../helpers/prom-text';
import { waitFor } from '../helpers/wait';

afterEach(closeAll);

const MODEL = 'm';
const KEY = 'Bearer sk-test';
const keyId = createHash('sha256').update(KEY).digest('hex').slice(0, 8);

/** An engine: JSON with usage, or a stream of three tokens and a usage chunk; requests with user "hold" wait. */
async function usageEngine(): Promise<{ endpoint: string; held: ServerResponse[] }> {
  const held: ServerResponse[] = [];
  const u = await upstream(async (_req, res, body) => {
    const b = JSON.parse(body) as { stream?: boolean; user?: string };
    if (b.user === 'hold') return void held.push(res);
    if (!b.stream) return void res.writeHead(200, { 'content-type': 'application/json' }).end(completion(MODEL));
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const w of ['a', 'b', 'c']) {
      res.write(chunk(MODEL, w));
      await sleep(5);
    }
    const usage = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 };
    res.end(
      `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', choices: [], usage })}\n\ndata: [DONE]\n\n`,
    );
  });
  return { endpoint: u.endpoint, held };
}

const send = (url: string, extra: Record<string, unknown> = {}): Promise<Response> =>
  post(`${url}/v1/chat/completions`, chat(MODEL, extra), { headers: { authorization: KEY } });

test('requests, tokens, TTFT, time per token and added latency move; the inference port serves no /metrics', async () => {
  const e = await usageEngine();
  const rows: RouteRows = { models: [MODEL], replicas: [ready('r1', MODEL, e.endpoint)] };
  const gw = await gateway(rows, { metrics: true });
  expect(gw.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
  expect(gw.metricsUrl).not.toContain(new URL(gw.url).port);
  expect((await fetch(`${gw.url}/metrics`)).status).toBe(404);
  const metricsUrl = gw.metricsUrl as string;

  const before = await scrape(metricsUrl);
  const labels = { model: MODEL, key: keyId, status: '200' };
  expect(valueOf(before, 'llmgw_gateway_requests_total', labels)).toBe(0);

  expect((await send(gw.url)).status).toBe(200);
  const streamed = await send(gw.url, { stream: true });
  expect(streamed.status).toBe(200);
  expect(await streamed.text()).toContain('[DONE]');
  // The stream's close is metered when the server side closes: a scrape right after may still miss it.
  const after = await waitFor(
    async () => {
      const m = await scrape(metricsUrl);
      return valueOf(m, 'llmgw_gateway_requests_total', labels) === 2 ? m : null;
    },
    { timeoutMs: 5000, what: 'two requests counted' },
  );
  // Non-streamed usage (1 + 1) and the stream's usage chunk (7 + 3).
  expect(valueOf(after, 'llmgw_gateway_prompt_tokens_total', { model: MODEL, key: keyId })).toBe(8);
  expect(valueOf(after, 'llmgw_gateway_completion_tokens_total', { model: MODEL, key: keyId })).toBe(4);
  expect(valueOf(after, 'llmgw_gateway_ttft_seconds_count', { model: MODEL })).toBe(1);
  expect(valueOf(after, 'llmgw_gateway_ttft_seconds_sum', { model: MODEL })).toBeGreaterThan(0);
  expect(valueOf(after, 'llmgw_gateway_time_per_output_token_seconds_count', { model: MODEL })).toBe(1);
  expect(valueOf(after, 'llmgw_gateway_added_latency_seconds_count')).toBe(2);
  const added = valueOf(after, 'llmgw_gateway_added_latency_seconds_sum');
  expect(added).toBeGreaterThan(0);
  expect(added).toBeLessThan(1);
  // The gateway's own answers count too: an unknown model is labelled '' (clients cannot mint label values).
  expect((await post(`${gw.url}/v1/chat/completions`, chat('nope'), { headers: { authorization: KEY } })).status).toBe(
    404,
  );
  const last = await scrape(metricsUrl);
  expect(valueOf(last, 'llmgw_gateway_requests_total', { model: '', key: keyId, status: '404' })).toBe(1);
  expect(valueOf(last, 'process_cpu_seconds_total')).toBeGreaterThan(0);
  expect(undocumented(last, readFileSync(join(__dirname, '../../docs/metrics.md'), 'utf8'))).toEqual([]);
});

test('in-flight and queued move while requests wait; 429s are counted', async () => {
  const e = await usageEngine();
  const rows: RouteRows = {
    models: [MODEL],
    replicas: [ready('r1', MODEL, e.endpoint)],
    maxConcurrent: { [MODEL]: 1 },
  };
  const gw = await gateway(rows, {
    metrics: true,
    admission: { queueMax: 1, queueTimeoutMs: 10_000, defaultMaxConcurrent: 64 },
  });
  const metricsUrl = gw.metricsUrl as string;
  const first = send(gw.url, { user: 'hold' });
  await waitFor(() => e.held.length === 1, { timeoutMs: 5000, what: 'the first request at r1' });
  const second = send(gw.url, { user: 'hold' });
  const m = await waitFor(
    async () => {
      const s = await scrape(metricsUrl);
      return valueOf(s, 'llmgw_gateway_queued', { model: MODEL }) === 1 ? s : null;
    },
    { timeoutMs: 5000, what: 'one request queued' },
  );
  expect(valueOf(m, 'llmgw_gateway_inflight', { model: MODEL, replica: 'r1' })).toBe(1);
  expect(valueOf(m, 'llmgw_gateway_replica_limit', { model: MODEL, replica: 'r1' })).toBe(1);
  const third = await send(gw.url);
  expect(third.status).toBe(429);
  const r = await scrape(metricsUrl);
  expect(valueOf(r, 'llmgw_gateway_admission_rejected_total', { model: MODEL, reason: 'queue-full' })).toBe(1);
  expect(valueOf(r, 'llmgw_gateway_requests_total', { model: MODEL, status: '429' })).toBe(1);
  for (const res of e.held.splice(0)) res.writeHead(200, { 'content-type': 'application/json' }).end(completion(MODEL));
  expect((await first).status).toBe(200);
  await waitFor(() => e.held.length === 1, { timeoutMs: 5000, what: 'the queued request at r1' });
  e.held.splice(0).forEach((res) => res.writeHead(200, { 'content-type': 'application/json' }).end(completion(MODEL)));
  expect((await second).status).toBe(200);
  const end = await waitFor(
    async () => {
      const s = await scrape(metricsUrl);
      return valueOf(s, 'llmgw_gateway_inflight') === 0 && valueOf(s, 'llmgw_gateway_queued') === 0 ? s : null;
    },
    { timeoutMs: 5000, what: 'nothing in flight or queued' },
  );
  expect(valueOf(end, 'llmgw_gateway_requests_total', { model: MODEL, status: '200' })).toBe(2);
});

test('a replica that refuses connections is counted as an upstream error and an ejection', async () => {
  const e = await usageEngine();
  const dead = `http://127.0.0.1:${await freePort()}`;
  const rows: RouteRows = { models: [MODEL], replicas: [ready('r1', MODEL, e.endpoint), ready('r0', MODEL, dead)] };
  const gw = await gateway(rows, { metrics: true });
  // Round-robin sends one of two requests to r0 first: it fails over to r1, and r0 is skipped after.
  expect((await send(gw.url)).status).toBe(200);
  expect((await send(gw.url)).status).toBe(200);
  const m = await scrape(gw.metricsUrl as string);
  expect(valueOf(m, 'llmgw_gateway_upstream_errors_total', { model: MODEL, replica: 'r0', kind: 'connect' })).toBe(1);
  expect(valueOf(m, 'llmgw_gateway_ejections_total', { replica: 'r0' })).toBe(1);
  expect(valueOf(m, 'llmgw_gateway_upstream_errors_total', { replica: 'r1' })).toBe(0);
});
