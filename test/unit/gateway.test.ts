/** The inference gateway against real upstream HTTP servers: routes, errors, streaming, retry, balancing, aborts. */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import type { RouteRows } from '../../lib/store/store';
import { buildGatewayApp } from '../../gateway/inference/app';
import { RoutingTable } from '../../gateway/inference/routing';
import { freePort } from '../helpers/ports';
import {
  chat,
  chunk,
  closeAll,
  completion,
  engine,
  gateway as startTestGateway,
  post,
  ready,
  sleep,
  table,
  upstream,
} from '../helpers/gateway';

/** Polls `cond` until true; fails the test with `what` otherwise. */
async function waitFor(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

const gateway = (rows: RouteRows, apiKeys: string[] = []): ReturnType<typeof startTestGateway> =>
  startTestGateway(rows, { apiKeys });

afterEach(closeAll);

// A real port rather than app.inject: light-my-request needs cookie@2, which is ESM-only and Jest's CommonJS runtime cannot load it.
describe('routes', () => {
  let app: FastifyInstance;
  let base = '';
  /** A small stand-in for app.inject over a real connection. */
  const call = async (o: {
    method: string;
    url: string;
    headers?: Record<string, string>;
    payload?: string;
  }): Promise<{ statusCode: number; json(): { error: { message: string; type: string; code: string } } }> => {
    const r = await fetch(base + o.url, { method: o.method, headers: o.headers, body: o.payload });
    const text = await r.text();
    return { statusCode: r.status, json: () => JSON.parse(text) };
  };
  const rows: RouteRows = {
    models: ['sim-large', 'sim-small', 'sim-empty'],
    replicas: [
      {
        id: 'sim-large-0',
        model: 'sim-large',
        state: 'waiting',
        endpoint: null,
        reason: 'no placement: needs 4 GPUs on one fabric',
      },
      ready('sim-small-0', 'sim-small', 'http://127.0.0.1:1'),
    ],
  };
  beforeAll(async () => {
    const routing = table(rows);
    await routing.refresh();
    app = Fastify();
    await app.register(buildGatewayApp({ routing, apiKeys: ['k1'] }));
    base = await app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => app.close());
  const auth = { authorization: 'Bearer k1', 'content-type': 'application/json' };

  it('lists models in the OpenAI shape', async () => {
    const r = await call({ method: 'GET', url: '/v1/models', headers: auth });
    expect(r.statusCode).toBe(200);
    expect(r.json()).toEqual({
      object: 'list',
      data: ['sim-empty', 'sim-large', 'sim-small'].map((id) => ({
        id,
        object: 'model',
        created: expect.any(Number),
        owned_by: 'llmgw',
      })),
    });
  });

  it('answers 404 naming an unknown model and the available ones', async () => {
    const r = await call({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload: chat('gpt-9') });
    expect(r.statusCode).toBe(404);
    expect(r.json().error).toEqual({
      message: expect.stringContaining('"gpt-9"'),
      type: 'invalid_request_error',
      code: 'LLMGW_UNKNOWN_MODEL',
    });
    expect(r.json().error.message).toContain('sim-large, sim-small');
  });

  it('answers 503 with the reason when no replica is ready', async () => {
    const r = await call({
      method: 'POST',
      url: '/v1/completions',
      headers: auth,
      payload: JSON.stringify({ model: 'sim-large', prompt: 'x' }),
    });
    expect(r.statusCode).toBe(503);
    expect(r.json().error.code).toBe('LLMGW_NO_READY_REPLICA');
    expect(r.json().error.message).toBe(
      'model sim-large has no ready replica (sim-large-0: waiting — no placement: needs 4 GPUs on one fabric)',
    );
    const empty = await call({
      method: 'POST',
      url: '/v1/embeddings',
      headers: auth,
      payload: JSON.stringify({ model: 'sim-empty', input: 'x' }),
    });
    expect(empty.json().error.message).toBe('model sim-empty has no replicas');
  });

  it('answers 400 in the OpenAI shape for malformed JSON, a missing model and a non-object body', async () => {
    for (const payload of ['{"model":', JSON.stringify({ messages: [] }), '[1,2]', JSON.stringify({ model: 7 })]) {
      const r = await call({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload });
      expect(r.statusCode).toBe(400);
      expect(r.json().error).toEqual({
        message: expect.any(String),
        type: 'invalid_request_error',
        code: 'LLMGW_BAD_REQUEST',
      });
    }
  });

  it('requires a valid API key except on /health', async () => {
    const none = await call({ method: 'GET', url: '/v1/models' });
    expect(none.statusCode).toBe(401);
    expect(none.json().error.code).toBe('invalid_api_key');
    const wrong = await call({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { ...auth, authorization: 'Bearer nope' },
      payload: chat('sim-small'),
    });
    expect(wrong.statusCode).toBe(401);
    expect((await call({ method: 'GET', url: '/health' })).json()).toEqual({ status: 'ok', models: 3 });
  });

  it('reports what it routes now on /health/routes, behind the API key', async () => {
    expect((await call({ method: 'GET', url: '/health/routes' })).statusCode).toBe(401);
    const r = await call({ method: 'GET', url: '/health/routes', headers: auth });
    expect(r.statusCode).toBe(200);
    expect(r.json()).toEqual({ models: { 'sim-large': 0, 'sim-small': 1, 'sim-empty': 0 } });
  });
});

describe('RoutingTable', () => {
  it('round-robins among idle replicas and keeps the last table when a refresh fails', async () => {
    let fail = false;
    const routing = new RoutingTable(
      async () => {
        if (fail) throw new Error('mysql down');
        return {
          models: ['m'],
          replicas: [ready('a', 'm', 'http://127.0.0.1:1'), ready('b', 'm', 'http://127.0.0.1:2/')],
        };
      },
      { refreshMs: 60_000 },
    );
    await routing.refresh();
    const ids = [0, 1, 2, 3].map(() => {
      const p = routing.pick('m');
      return p.kind === 'ok' ? p.replica.id : p.kind;
    });
    expect(ids).toEqual(['a', 'b', 'a', 'b']);
    fail = true;
    await expect(routing.refresh()).rejects.toThrow('mysql down');
    expect(routing.pick('m', new Set(['a']))).toEqual({
      kind: 'ok',
      replica: { id: 'b', endpoint: 'http://127.0.0.1:2', host: '127.0.0.1', port: 2, model: 'm', limit: 64 },
    });
    expect(routing.pick('m', new Set(['a', 'b']))).toEqual({
      kind: 'none-ready',
      reason: expect.stringContaining('no ready replica left'),
    });
  });
});

describe('proxying to real upstreams', () => {
  it('passes stream chunks through as they arrive', async () => {
    let sentLast = false;
    let sawFirst = false;
    const up = await upstream(async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(chunk('m', 'first'));
      await waitFor(() => sawFirst, 'the client to see the first chunk').catch(() => undefined);
      sentLast = true;
      res.end(`${chunk('m', 'last', 'stop')}data: [DONE]\n\n`);
    });
    const { url } = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', up.endpoint)] });
    const r = await post(`${url}/v1/chat/completions`, chat('m', { stream: true }));
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('text/event-stream');
    const reader = r.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toContain('first');
    expect(sentLast).toBe(false);
    sawFirst = true;
    let rest = '';
    for (let c = await reader.read(); !c.done; c = await reader.read()) rest += new TextDecoder().decode(c.value);
    expect(rest).toContain('data: [DONE]');
  });

  it('a request sent on pooled connections the replica dropped while idle goes on to a fresh one, not a 502', async () => {
    // As a node's door replaced new-first does: every connection the old door held closes as its next request
    // arrives. The gateway's pool holds three; all are stale; the one replica must still answer.
    let stale = false;
    const old = new WeakSet<object>();
    const server = createServer((req, res) => {
      if (stale && old.has(req.socket)) return void req.socket.destroy();
      old.add(req.socket);
      req.resume();
      req.on('end', () => {
        const model = 'm';
        setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end(completion(model)), 30);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const { url } = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', endpoint)] });
      const three = await Promise.all([1, 2, 3].map(() => post(`${url}/v1/chat/completions`, chat('m'))));
      expect(three.map((r) => r.status)).toEqual([200, 200, 200]);
      stale = true;
      const r = await post(`${url}/v1/chat/completions`, chat('m'));
      expect({ status: r.status, body: await r.text() }).toEqual({ status: 200, body: completion('m') });
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it('retries on a second replica when the first refuses connections or answers 503', async () => {
    const good = await upstream(engine());
    const busy = await upstream(
      (_req, res) => void res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"busy"}'),
    );
    const refused = `http://127.0.0.1:${await freePort()}`;
    const { url, routing } = await gateway({
      models: ['m'],
      replicas: [ready('m-0', 'm', refused), ready('m-1', 'm', busy.endpoint), ready('m-2', 'm', good.endpoint)],
    });
    for (let i = 0; i < 6; i++) {
      const r = await post(`${url}/v1/chat/completions`, chat('m'));
      expect(r.status).toBe(200);
      expect(((await r.json()) as { choices: { message: { content: string } }[] }).choices[0].message.content).toBe(
        'hello',
      );
    }
    expect(good.hits).toHaveLength(6);
    expect(busy.hits.length).toBeGreaterThan(0);
    for (const id of ['m-0', 'm-1', 'm-2']) expect(routing.inFlightOf(id)).toBe(0);
  });

  it('answers 502 when every replica fails, and passes a 5xx through when no other replica is left', async () => {
    const { url } = await gateway({
      models: ['m'],
      replicas: [ready('m-0', 'm', `http://127.0.0.1:${await freePort()}`)],
    });
    const r = await post(`${url}/v1/chat/completions`, chat('m'));
    expect(r.status).toBe(502);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe('LLMGW_UPSTREAM_FAILED');
    const busy = await upstream(
      (_req, res) =>
        void res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":{"message":"warming up"}}'),
    );
    const g2 = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', busy.endpoint)] });
    const r2 = await post(`${g2.url}/v1/chat/completions`, chat('m'));
    expect(r2.status).toBe(503);
    expect(await r2.text()).toContain('warming up');
  });

  it('balances by in-flight requests across two replicas', async () => {
    const held: ServerResponse[] = [];
    const slow = await upstream((_req, res) => void held.push(res));
    const fast = await upstream(engine());
    const { url, routing } = await gateway({
      models: ['m'],
      replicas: [ready('m-0', 'm', slow.endpoint), ready('m-1', 'm', fast.endpoint)],
    });
    const pending = post(`${url}/v1/chat/completions`, chat('m'));
    await waitFor(() => held.length === 1, 'the first request to reach m-0');
    expect(routing.inFlightOf('m-0')).toBe(1);
    // Round-robin alone would send every other request to the busy replica.
    for (let i = 0; i < 4; i++) expect((await post(`${url}/v1/chat/completions`, chat('m'))).status).toBe(200);
    expect(fast.hits).toHaveLength(4);
    held[0].writeHead(200, { 'content-type': 'application/json' }).end(completion('m'));
    expect((await pending).status).toBe(200);
    await waitFor(() => routing.inFlightOf('m-0') === 0, 'm-0 to be released');
  });

  it('aborts the upstream request when the client disconnects, and cuts the client when the upstream dies inside an event', async () => {
    const up = await upstream(async (req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(chunk('m', 'tick'));
      // Half an event: nothing the gateway could add after it would parse, so the client's connection is cut.
      if (req.url === '/v1/completions')
        return void res.write('data: {"id":"chatcmpl-1","cho', () => setTimeout(() => res.destroy(), 50));
      const t = setInterval(() => res.write(chunk('m', 'tick')), 20);
      res.once('close', () => clearInterval(t));
    });
    const { url, routing } = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', up.endpoint)] });
    const ac = new AbortController();
    const r = await post(`${url}/v1/chat/completions`, chat('m', { stream: true }), { signal: ac.signal });
    await r.body!.getReader().read();
    ac.abort();
    await waitFor(() => up.closedEarly === 1, 'the upstream request to be aborted');
    await waitFor(() => routing.inFlightOf('m-0') === 0, 'the in-flight count to drop');

    const broken = await post(`${url}/v1/completions`, JSON.stringify({ model: 'm', prompt: 'x', stream: true }));
    expect(broken.status).toBe(200);
    await expect(broken.text()).rejects.toThrow();
  });

  it('works with the openai client, streamed and not', async () => {
    const up = await upstream(engine(5));
    const { url } = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', up.endpoint)] }, ['k1']);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'k1', maxRetries: 0 });
    expect((await client.models.list()).data.map((m) => m.id)).toEqual(['m']);
    const plain = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    expect(plain.choices[0].message.content).toBe('hello');
    const stream = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    });
    let text = '';
    for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
    expect(text).toBe('Hello!');
    await expect(
      new OpenAI({ baseURL: `${url}/v1`, apiKey: 'bad', maxRetries: 0 }).models.list(),
    ).rejects.toMatchObject({ status: 401 });
  });
});
