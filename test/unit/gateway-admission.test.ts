/** Admission on a real port: a replica's limit, the bounded queue (429, 503 with Retry-After), fairness between keys. */
import type { ServerResponse } from 'node:http';
import type { RouteRows } from '../../lib/store/store';
import { probeSlots } from '../../gateway/inference/slots';
import { startSimEngine } from '../../lib/sim/server';
import { chat, closeAll, completion, gateway, post, ready, sleep, upstream } from '../helpers/gateway';
import { waitFor } from '../helpers/wait';

afterEach(closeAll);

const MODEL = 'm';

/** An engine that holds every chat request until the test lets it go; `held` counts the ones it holds. */
async function heldEngine(): Promise<{ endpoint: string; held: () => number; releaseAll: () => void }> {
  const waiting: ServerResponse[] = [];
  const u = await upstream((req, res) => {
    if (req.url === '/props') return void res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    waiting.push(res);
  });
  const answer = (res: ServerResponse): void =>
    void res.writeHead(200, { 'content-type': 'application/json' }).end(completion(MODEL));
  return {
    endpoint: u.endpoint,
    held: () => waiting.length,
    releaseAll: () => waiting.splice(0).forEach(answer),
  };
}

const rows = (endpoint: string, maxConcurrent?: number): RouteRows => ({
  models: [MODEL],
  replicas: [ready('r1', MODEL, endpoint)],
  ...(maxConcurrent ? { maxConcurrent: { [MODEL]: maxConcurrent } } : {}),
});

const ask = (url: string, key = 'k'): Promise<Response> =>
  post(`${url}/v1/chat/completions`, chat(MODEL), { headers: { authorization: `Bearer ${key}` } });

test('a full queue answers 429 LLMGW_QUEUE_FULL with Retry-After; the admitted and queued ones are answered', async () => {
  const e = await heldEngine();
  const gw = await gateway(rows(e.endpoint, 1), {
    admission: { queueMax: 1, queueTimeoutMs: 10_000, defaultMaxConcurrent: 64 },
  });
  const first = ask(gw.url);
  await waitFor(() => e.held() === 1, { timeoutMs: 5000, what: 'the first request at the engine' });
  const second = ask(gw.url);
  // The second waits in the queue; the engine must not see it while the first holds the replica's one slot.
  await sleep(100);
  expect(e.held()).toBe(1);
  const third = await ask(gw.url);
  expect(third.status).toBe(429);
  expect(third.headers.get('retry-after')).toBe('1');
  expect(await third.json()).toMatchObject({ error: { code: 'LLMGW_QUEUE_FULL', type: 'rate_limit_exceeded' } });
  e.releaseAll();
  expect((await first).status).toBe(200);
  await waitFor(() => e.held() === 1, { timeoutMs: 5000, what: 'the queued request to reach the engine' });
  e.releaseAll();
  expect((await second).status).toBe(200);
});

test('a request that waits past the deadline gets 503 LLMGW_QUEUE_TIMEOUT with Retry-After', async () => {
  const e = await heldEngine();
  const gw = await gateway(rows(e.endpoint, 1), {
    admission: { queueMax: 10, queueTimeoutMs: 300, defaultMaxConcurrent: 64 },
  });
  const first = ask(gw.url);
  await waitFor(() => e.held() === 1, { timeoutMs: 5000, what: 'the first request at the engine' });
  const t0 = Date.now();
  const late = await ask(gw.url);
  expect(Date.now() - t0).toBeGreaterThanOrEqual(290);
  expect(late.status).toBe(503);
  expect(Number(late.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  expect(await late.json()).toMatchObject({ error: { code: 'LLMGW_QUEUE_TIMEOUT', type: 'server_error' } });
  // It never reached the engine, and it freed its place: the replica still serves.
  expect(e.held()).toBe(1);
  e.releaseAll();
  expect((await first).status).toBe(200);
  const after = ask(gw.url);
  await waitFor(() => e.held() === 1, { timeoutMs: 5000, what: 'a later request at the engine' });
  e.releaseAll();
  expect((await after).status).toBe(200);
});

test('a client that leaves the queue gives up its place: the next request waits instead of a 429', async () => {
  const e = await heldEngine();
  const gw = await gateway(rows(e.endpoint, 1), {
    admission: { queueMax: 1, queueTimeoutMs: 10_000, defaultMaxConcurrent: 64 },
  });
  const first = ask(gw.url);
  await waitFor(() => e.held() === 1, { timeoutMs: 5000, what: 'the first request at the engine' });
  const leaving = new AbortController();
  const gone = post(`${gw.url}/v1/chat/completions`, chat(MODEL), { signal: leaving.signal }).catch(
    (err: Error) => err.name,
  );
  await sleep(100);
  leaving.abort();
  expect(await gone).toBe('AbortError');
  await sleep(100);
  const next = ask(gw.url);
  await sleep(100);
  e.releaseAll();
  expect((await first).status).toBe(200);
  await waitFor(() => e.held() === 1, { timeoutMs: 5000, what: 'the next request, queued, at the engine' });
  e.releaseAll();
  expect((await next).status).toBe(200);
});

test('under contention keys take turns: one key flooding does not starve another', async () => {
  const order: string[] = [];
  let first: ServerResponse | null = null;
  const answer = (res: ServerResponse): void =>
    void res.writeHead(200, { 'content-type': 'application/json' }).end(completion(MODEL));
  const u = await upstream((req, res, body) => {
    order.push(String((JSON.parse(body) as { user: string }).user));
    // The first is held until every other request waits in the gateway; the rest are answered in turn.
    if (order.length === 1) first = res;
    else setTimeout(() => answer(res), 5);
  });
  const gw = await gateway(rows(u.endpoint, 1), {
    admission: { queueMax: 100, queueTimeoutMs: 20_000, defaultMaxConcurrent: 64 },
  });
  const send = (key: string, i: number): Promise<Response> =>
    post(`${gw.url}/v1/chat/completions`, chat(MODEL, { user: `${key}${i}` }), {
      headers: { authorization: `Bearer ${key}` },
    });
  const flood = Array.from({ length: 10 }, (_, i) => send('a', i));
  await waitFor(() => order.length === 1, { timeoutMs: 5000, what: 'the flood to start' });
  await sleep(200);
  const other = [send('b', 0), send('b', 1)];
  await sleep(200);
  expect(order.length).toBe(1);
  answer(first as unknown as ServerResponse);
  const answers = await Promise.all([...flood, ...other]);
  expect(answers.map((r) => r.status)).toEqual(answers.map(() => 200));
  // First come first served would put b's two requests last (11th and 12th); in turn, b waits for one of a's each.
  expect(order.slice(0, 5).map((u) => u[0])).toEqual(['a', 'a', 'b', 'a', 'b']);
});

test("a replica's limit defaults to the slots its engine reports on /props", async () => {
  const waiting: ServerResponse[] = [];
  const u = await upstream(
    (req, res) => {
      if (req.url === '/props')
        return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"total_slots":2}');
      waiting.push(res);
    },
    { props: true },
  );
  expect(await probeSlots({ id: 'r1', endpoint: u.endpoint, host: '', port: 0, model: MODEL, limit: 0 })).toBe(2);
  const gw = await gateway(rows(u.endpoint), {
    admission: { queueMax: 0, queueTimeoutMs: 1000, defaultMaxConcurrent: 64 },
    routing: { probeSlots },
  });
  await waitFor(() => u.probes > 0, { timeoutMs: 5000, what: 'the gateway to ask for slots' });
  await sleep(50);
  const two = [ask(gw.url), ask(gw.url)];
  await waitFor(() => waiting.length === 2, { timeoutMs: 5000, what: 'two requests at the engine' });
  const third = await ask(gw.url);
  expect(third.status).toBe(429);
  waiting.splice(0).forEach((res) => res.writeHead(200, { 'content-type': 'application/json' }).end(completion(MODEL)));
  expect((await Promise.all(two)).map((r) => r.status)).toEqual([200, 200]);
});

test('the sim engine reports its --slots on /props as llama.cpp does, and the gateway reads them', async () => {
  const sim = await startSimEngine({
    model: MODEL,
    host: '127.0.0.1',
    port: 0,
    rank: 0,
    world: 1,
    distHost: '127.0.0.1',
    distPort: 0,
    tokensPerSecond: 0,
    slots: 3,
  });
  try {
    const endpoint = `http://127.0.0.1:${sim.port}`;
    expect(await probeSlots({ id: 's', endpoint, host: '127.0.0.1', port: sim.port, model: MODEL, limit: 0 })).toBe(3);
  } finally {
    await sim.close();
  }
});
