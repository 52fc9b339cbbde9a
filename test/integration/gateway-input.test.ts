/**
 * Bad input at the real gateway (`llmgw gateway`, its own process, routing from a MariaDB of this test's own, in
 * front of engines this test plays): an upload that stalls is answered 408 and closed while a long stream is not
 * cut; a JSON nesting bomb is refused without stalling /health or reaching an engine; every refusal is in OpenAI's
 * shape with an llmgw code; echoed input is cut and escaped, and 100 KB of headers get a 431, not a reset;
 * content types other than JSON get 415 and CORS follows gateway.corsOrigins; embeddings for a model that cannot
 * embed are refused by the gateway; a malformed request is refused once, never retried on every replica; and a
 * SIGTERM stops the gateway within its grace even with a stalled upload and a stream open.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';
import type { ServerConfig } from '../../config/types';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import type { ModelSpec } from '../../lib/types';
import { dropDatabase, testConfig, testMysqlUrl, TEST_API_KEY } from '../helpers/cluster-parts';
import { chat, chunk, closeAll, completion, post, sleep, upstream, type Upstream } from '../helpers/gateway';
import { rawExchange } from '../helpers/raw-http';
import { waitFor } from '../helpers/wait';

const LLMGW = resolve(__dirname, '../../bin/llmgw.js');
// The gateway role needs a key (testConfig's static one): every request here carries it, so what is tested is the input.
const AUTH = `authorization: Bearer ${TEST_API_KEY}\r\n`;
const fetch = (url: string, init: RequestInit = {}): Promise<Response> =>
  globalThis.fetch(url, { ...init, headers: { authorization: `Bearer ${TEST_API_KEY}`, ...(init.headers ?? {}) } });
const ORIGIN = 'https://app.example.net';
const model = (name: string, engine: 'sim' | 'llamacpp', args: string[] = []): ModelSpec => ({
  name,
  source: `sim://${name}`,
  replicas: 1,
  profiles: [{ name: 'default', engine, nodes: 1, gpusPerNode: 0, args }],
});

describe('bad input at the real gateway', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-gw-input-'));
  let config: ServerConfig;
  let store: Store;
  let gw: ChildProcess;
  let log = '';
  let url = '';
  let port = 0;
  let engine: Upstream;
  let refusing: Upstream[];
  let embedder: Upstream;

  beforeAll(async () => {
    // An engine that streams slowly when asked to: "slow" in the prompt, 5 events 800 ms apart; "slower", 30.
    engine = await upstream(async (_req, res, body) => {
      const b = JSON.parse(body) as { model: string; stream?: boolean };
      if (!b.stream) return void res.writeHead(200, { 'content-type': 'application/json' }).end(completion(b.model));
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders();
      for (let i = 0; i < (body.includes('slower') ? 30 : 5); i++) {
        res.write(chunk(b.model, `w${i} `));
        if (body.includes('slow')) await sleep(800);
      }
      res.end('data: [DONE]\n\n');
    });
    // llama.cpp's answer to a `tools` it cannot read: a 500.
    refusing = await Promise.all(
      [0, 1].map(() =>
        upstream(
          (_req, res) =>
            void res.writeHead(500, { 'content-type': 'application/json' }).end(
              JSON.stringify({
                error: {
                  code: 500,
                  message: 'Failed to parse tools: Expected \'tools\' to be an array, got "x"; tools = "x"',
                  type: 'server_error',
                },
              }),
            ),
        ),
      ),
    );
    embedder = await upstream(
      (_req, res) =>
        void res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.1] }] })),
    );

    const base = await testConfig({ temporalAddress: '127.0.0.1:1', mysqlUrl: testMysqlUrl(), catalog: [] });
    config = {
      ...base,
      gateway: { ...base.gateway, timeouts: { ...base.gateway.timeouts, requestMs: 2000 }, corsOrigins: [ORIGIN] },
    };
    port = config.listeners.gateway.port;
    url = `http://127.0.0.1:${port}`;
    store = new Store(await openDatabase(config.mysql.url));
    for (const spec of [
      model('sim-chat', 'sim'),
      model('refusing', 'llamacpp'),
      model('llama-embed', 'llamacpp', ['--embeddings']),
    ])
      await store.upsertModel(spec, false);
    const replicas: [string, string, string][] = [
      ['sim-chat-0', 'sim-chat', engine.endpoint],
      ['refusing-0', 'refusing', refusing[0]?.endpoint ?? ''],
      ['refusing-1', 'refusing', refusing[1]?.endpoint ?? ''],
      ['llama-embed-0', 'llama-embed', embedder.endpoint],
    ];
    for (const [id, m, endpoint] of replicas)
      await store.setReplica({ id, model: m, profile: 'default', state: 'ready', endpoint });
    const file = join(dir, 'server.yaml');
    writeFileSync(file, stringify(config));
    gw = spawn(process.execPath, [LLMGW, 'gateway', '--config', file], { stdio: ['ignore', 'ignore', 'pipe'] });
    gw.stderr?.on('data', (b: Buffer) => void (log = (log + b.toString()).slice(-20_000)));
    await waitFor(
      async () => {
        if (gw.exitCode !== null) throw new Error(`the gateway exited: ${log}`);
        const r = await fetch(`${url}/health/routes`);
        return r.ok && ((await r.json()) as { models: Record<string, number> }).models.refusing === 2;
      },
      { timeoutMs: 30_000, what: 'the gateway to route the test models' },
    );
  }, 60_000);

  afterAll(async () => {
    gw?.kill('SIGKILL');
    await closeAll();
    await store?.pool.end();
    if (config) await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  const hits = (): number =>
    engine.hits.length + refusing.reduce((n, u) => n + u.hits.length, 0) + embedder.hits.length;
  const errorOf = async (
    r: Response,
  ): Promise<{ status: number; error: { message: string; type: string; code: string } }> => ({
    status: r.status,
    error: ((await r.json()) as { error: { message: string; type: string; code: string } }).error,
  });

  test('1: an upload whose body (or headers) stop coming is answered 408 and closed; a stream longer than the request timeout is not cut', async () => {
    const head = `POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n${AUTH}`;
    const stalls = {
      'a Content-Length larger than the body': `${head}content-length: 1000\r\n\r\n{"model":"sim-chat",`,
      'a chunked body without its last chunk': `${head}transfer-encoding: chunked\r\n\r\n9\r\n{"model":\r\n`,
      'headers that never end': `${head}x-slow: 1\r\n`,
    };
    const before = hits();
    const answers = await Promise.all(Object.values(stalls).map((data) => rawExchange(port, data, 30_000)));
    for (const [i, what] of Object.keys(stalls).entries()) {
      const a = answers[i];
      console.log(`${what}: ${a?.end} after ${a?.ms} ms`);
      expect({ what, end: a?.end }).toEqual({ what, end: 'closed' });
      expect(a?.text).toMatch(/^HTTP\/1\.1 408 /);
      expect(JSON.parse(a?.text.split('\r\n\r\n')[1] ?? '')).toMatchObject({
        error: { code: 'LLMGW_REQUEST_TIMEOUT', type: 'invalid_request_error' },
      });
    }
    expect(hits()).toBe(before);
    // The answer is not bounded by the request timeout (2 s here): a 4 s stream arrives whole.
    const r = await post(
      `${url}/v1/chat/completions`,
      chat('sim-chat', { stream: true, messages: [{ role: 'user', content: 'slow' }] }),
    );
    const text = await r.text();
    expect(r.status).toBe(200);
    expect(text).toContain('w4 ');
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  test('2: a 10 MB JSON nesting bomb is refused at once, reaches no engine, and /health keeps answering meanwhile', async () => {
    const depth = 5 * 1024 * 1024;
    const bomb = `{"model":"sim-chat","messages":${'['.repeat(depth)}${']'.repeat(depth)}}`;
    const before = hits();
    const health: number[] = [];
    let polling = true;
    const poll = (async (): Promise<void> => {
      while (polling) {
        const t0 = Date.now();
        expect((await fetch(`${url}/health`)).status).toBe(200);
        health.push(Date.now() - t0);
        await sleep(20);
      }
    })();
    for (let i = 0; i < 3; i++) {
      const r = await post(`${url}/v1/chat/completions`, bomb);
      expect(await errorOf(r)).toEqual({
        status: 400,
        error: {
          message: 'the request body nests deeper than 128 levels',
          type: 'invalid_request_error',
          code: 'LLMGW_BAD_REQUEST',
        },
      });
    }
    polling = false;
    await poll;
    console.log(`GET /health during 3 bombs: ${health.length} requests, slowest ${Math.max(...health)} ms`);
    // Before the scan, JSON.parse took each bomb whole and blocked the gateway for 1.2-8 s. The refusal's message is
    // the scan's own (JSON.parse fails a bomb with a stack overflow, if at all), so the scan read it; how long
    // /health waited meanwhile is a figure, printed above and measured by `npm run bench:bomb`, not bounded here: a
    // bound flakes on a machine whose two cores are busy with other suites (1,749 ms seen there once).
    expect(health.length).toBeGreaterThan(0);
    expect(hits()).toBe(before);
    // Nesting a tool schema might need is no bomb: 100 levels pass.
    const deep = JSON.stringify({
      model: 'sim-chat',
      messages: [{ role: 'user', content: 'hi' }],
      metadata: JSON.parse(`${'['.repeat(100)}${']'.repeat(100)}`) as unknown,
    });
    expect((await post(`${url}/v1/chat/completions`, deep)).status).toBe(200);
  }, 60_000);

  test("9: every refusal is OpenAI's error shape with an llmgw code: unknown routes, wrong methods, malformed JSON, bad field types", async () => {
    const cases: [string, Promise<Response>, number, string][] = [
      ['unknown route', fetch(`${url}/v1/nope`), 404, 'LLMGW_NOT_FOUND'],
      ['wrong method', fetch(`${url}/v1/chat/completions`), 404, 'LLMGW_NOT_FOUND'],
      ['malformed JSON', post(`${url}/v1/chat/completions`, '{"model": "sim-chat",'), 400, 'LLMGW_BAD_REQUEST'],
      ['an array body', post(`${url}/v1/completions`, '[1, 2]'), 400, 'LLMGW_BAD_REQUEST'],
      ['an empty body', post(`${url}/v1/completions`, ''), 400, 'LLMGW_BAD_REQUEST'],
      [
        'stream not a boolean',
        post(`${url}/v1/chat/completions`, chat('sim-chat', { stream: 'yes' })),
        400,
        'LLMGW_BAD_REQUEST',
      ],
    ];
    for (const [what, r, status, code] of cases) {
      const e = await errorOf(await r);
      expect({ what, status: e.status, code: e.error.code, type: typeof e.error.message }).toEqual({
        what,
        status,
        code,
        type: 'string',
      });
    }
    expect(
      (await errorOf(await post(`${url}/v1/chat/completions`, chat('sim-chat', { stream: 'yes' })))).error.message,
    ).toBe('stream: expected true or false, got a string');
  });

  test('10: echoed input is cut and escaped; 100 KB of headers get a 431, not a reset', async () => {
    const name = `${'\u0001\n\u001b[31m'.repeat(10)}${'m'.repeat(10_000)}`;
    const e = await errorOf(await post(`${url}/v1/chat/completions`, chat(name)));
    expect(e.status).toBe(404);
    expect(e.error.code).toBe('LLMGW_UNKNOWN_MODEL');
    expect(e.error.message.length).toBeLessThan(300);
    expect(e.error.message).not.toMatch(/[\u0000-\u001f]/);
    expect(e.error.message).toContain('\\u0001\\n\\u001b[31m');
    const big = await rawExchange(
      port,
      `GET /health HTTP/1.1\r\nhost: gw\r\nx-big: ${'a'.repeat(100_000)}\r\n\r\n`,
      10_000,
    );
    expect(big.end).toBe('closed');
    expect(big.text).toMatch(/^HTTP\/1\.1 431 /);
    expect(JSON.parse(big.text.split('\r\n\r\n')[1] ?? '')).toMatchObject({
      error: { code: 'LLMGW_HEADERS_TOO_LARGE' },
    });
  });

  test("11: a body that is not JSON gets 415; CORS answers gateway.corsOrigins and refuses other origins' preflights", async () => {
    const before = hits();
    const asText = await errorOf(
      await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'text/plain' },
        body: chat('sim-chat'),
      }),
    );
    expect(asText).toMatchObject({
      status: 415,
      error: { code: 'LLMGW_UNSUPPORTED_MEDIA_TYPE', message: expect.stringContaining('"text/plain"') },
    });
    const asForm = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      body: new URLSearchParams({ model: 'sim-chat' }),
    });
    expect((await errorOf(asForm)).status).toBe(415);
    expect(hits()).toBe(before);
    const preflight = (origin: string): Promise<Response> =>
      fetch(`${url}/v1/chat/completions`, {
        method: 'OPTIONS',
        headers: {
          origin,
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'authorization, content-type',
        },
      });
    const ok = await preflight(ORIGIN);
    expect(ok.status).toBe(204);
    expect(ok.headers.get('access-control-allow-origin')).toBe(ORIGIN);
    expect(ok.headers.get('access-control-allow-headers')).toContain('authorization');
    expect(await errorOf(await preflight('https://evil.example'))).toMatchObject({
      status: 403,
      error: { code: 'LLMGW_CORS_REFUSED', message: expect.stringContaining('gateway.corsOrigins') },
    });
    expect(
      (await fetch(`${url}/v1/models`, { headers: { origin: ORIGIN } })).headers.get('access-control-allow-origin'),
    ).toBe(ORIGIN);
    expect(
      (await fetch(`${url}/v1/models`, { headers: { origin: 'https://evil.example' } })).headers.get(
        'access-control-allow-origin',
      ),
    ).toBeNull();
  });

  test('12: /v1/embeddings for a model whose engine cannot embed is refused by the gateway; one that can is served', async () => {
    const before = embedder.hits.length + engine.hits.length;
    const e = await errorOf(await post(`${url}/v1/embeddings`, JSON.stringify({ model: 'sim-chat', input: 'hello' })));
    expect(e).toEqual({
      status: 400,
      error: {
        code: 'LLMGW_ENDPOINT_UNSUPPORTED',
        type: 'invalid_request_error',
        message: 'model "sim-chat" cannot serve /v1/embeddings: the sim engine serves no embeddings',
      },
    });
    expect(engine.hits.length + embedder.hits.length).toBe(before);
    expect((await post(`${url}/v1/embeddings`, JSON.stringify({ model: 'llama-embed', input: 'hello' }))).status).toBe(
      200,
    );
    expect(embedder.hits).toHaveLength(1);
  });

  test('6: a request an engine would refuse is refused once by the gateway; an engine\'s 500 "Failed to parse" is a 400, never retried', async () => {
    const before = hits();
    for (const [extra, message] of [
      [{ tools: 'x' }, 'tools: expected an array of tools, got a string'],
      [{ tools: [{ type: 'function' }] }, 'tools: [0]: expected {"type": "function", "function": {"name": …}}'],
      [{ n: 0 }, 'n: expected a whole number from 1 to 128, got 0'],
      [{ temperature: 'hot' }, 'temperature: expected a number, got a string'],
      [{ messages: [] }, 'messages: must not be empty'],
    ] as const) {
      expect(await errorOf(await post(`${url}/v1/chat/completions`, chat('sim-chat', extra)))).toEqual({
        status: 400,
        error: { code: 'LLMGW_BAD_REQUEST', type: 'invalid_request_error', message },
      });
    }
    expect(hits()).toBe(before);
    const e = await errorOf(await post(`${url}/v1/chat/completions`, chat('refusing')));
    expect(e).toEqual({
      status: 400,
      error: {
        code: 'LLMGW_BAD_REQUEST',
        type: 'invalid_request_error',
        message:
          'the engine refused the request: Failed to parse tools: Expected \'tools\' to be an array, got "x"; tools = "x"',
      },
    });
    expect((refusing[0]?.hits.length ?? 0) + (refusing[1]?.hits.length ?? 0)).toBe(1);
  });

  test('18: SIGTERM stops the gateway within its grace, a stalled upload and an open stream notwithstanding', async () => {
    const stalled = rawExchange(
      port,
      `POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n${AUTH}content-length: 1000\r\n\r\n{`,
      60_000,
    );
    const started = engine.hits.length;
    const stream = post(
      `${url}/v1/chat/completions`,
      chat('sim-chat', { stream: true, messages: [{ role: 'user', content: 'slower' }] }),
    )
      .then((r) => r.text())
      .catch((err: Error) => err.message);
    await waitFor(() => engine.hits.length > started, { timeoutMs: 5000, what: 'a 24 s stream to start' });
    const t0 = Date.now();
    const exited = new Promise<number | null>((r) => gw.once('exit', (code) => r(code)));
    gw.kill('SIGTERM');
    const code = await Promise.race([exited, sleep(25_000).then(() => 'still running after 25 s')]);
    console.log(`gateway stopped ${Date.now() - t0} ms after SIGTERM`);
    expect(code).toBe(0);
    expect((await stalled).end).not.toBe('open');
    // Cut at the end of the grace: no [DONE].
    expect(await stream).not.toContain('[DONE]');
  }, 40_000);
});
