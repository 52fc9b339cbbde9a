/**
 * The gateway's fast path (gateway/inference/fast-path.ts) answers the inference routes as fastify's routes do: the
 * same requests sent once to the fast path and once to fastify (a query string sends a request there) get the same
 * status, headers and body, and count the same in the metrics; what the fast path leaves to fastify still works.
 */
import { request } from 'node:http';
import type { RouteRows } from '../../lib/store/store';
import { closeAll, engine, gateway, ready, upstream } from '../helpers/gateway';
import { scrape, valueOf } from '../helpers/prom-text';
import { waitFor } from '../helpers/wait';

afterEach(closeAll);

const KEY = 'sk-fast';
const LIMIT = 2048;

interface Answer {
  status: number;
  contentType: string | undefined;
  retryAfter: string | undefined;
  requestId: string | undefined;
  body: string;
}

/** One raw HTTP/1.1 request: `chunks` sent as a chunked body (no Content-Length) when `chunked`. */
function send(
  url: string,
  path: string,
  o: { headers?: Record<string, string>; body?: string; chunks?: string[] } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path,
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          authorization: `Bearer ${KEY}`,
          ...(o.body !== undefined ? { 'content-length': String(Buffer.byteLength(o.body)) } : {}),
          ...o.headers,
        },
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            contentType: res.headers['content-type'],
            retryAfter: res.headers['retry-after'] as string | undefined,
            requestId: res.headers['x-request-id'] as string | undefined,
            body,
          }),
        );
      },
    );
    req.on('error', reject);
    for (const c of o.chunks ?? []) req.write(c);
    req.end(o.body);
  });
}

const chatBody = (model: string): string => JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] });

test('the fast path and fastify answer every case alike, and the metrics count both alike', async () => {
  const u = await upstream(engine());
  const rows: RouteRows = {
    models: ['m', 'idle'],
    replicas: [
      ready('m-0', 'm', u.endpoint),
      { id: 'idle-0', model: 'idle', state: 'waiting', endpoint: null, reason: 'no placement' },
    ],
  };
  const { url, metricsUrl } = await gateway(rows, { apiKeys: [KEY], metrics: true, bodyLimit: LIMIT });
  const big = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(LIMIT) }] });
  const cases: [string, string, Parameters<typeof send>[2], number][] = [
    ['a proxied answer', '/v1/chat/completions', { body: chatBody('m') }, 200],
    ['no key', '/v1/chat/completions', { body: chatBody('m'), headers: { authorization: '' } }, 401],
    ['a wrong key', '/v1/completions', { body: chatBody('m'), headers: { authorization: 'Bearer sk-no' } }, 401],
    ['not JSON', '/v1/chat/completions', { body: '{"model": ' }, 400],
    ['an empty body', '/v1/chat/completions', { body: '' }, 400],
    ['a field of the wrong type', '/v1/chat/completions', { body: '{"model":"m","messages":"hi"}' }, 400],
    ['an unknown model', '/v1/chat/completions', { body: chatBody('gpt-9') }, 404],
    ['no ready replica', '/v1/chat/completions', { body: chatBody('idle') }, 503],
    ['Content-Length over the limit', '/v1/chat/completions', { body: big }, 413],
    ['a chunked body over the limit', '/v1/chat/completions', { chunks: [big.slice(0, 1500), big.slice(1500)] }, 413],
    ['a chunked body within it', '/v1/embeddings', { chunks: ['{"model":"m",', '"input":"x"}'] }, 200],
  ];
  for (const [what, path, o, status] of cases) {
    const fast = await send(url, path, o);
    const slow = await send(url, `${path}?via=fastify`, o);
    expect({ what, status: fast.status }).toEqual({ what, status });
    expect({ what, ...fast, requestId: typeof fast.requestId }).toEqual({
      what,
      ...slow,
      requestId: typeof slow.requestId,
    });
    expect(fast.requestId).toMatch(/^[0-9a-f-]{36}$/);
  }
  // A client's request id is echoed by both.
  for (const path of ['/v1/chat/completions', '/v1/chat/completions?via=fastify'])
    expect((await send(url, path, { body: chatBody('m'), headers: { 'x-request-id': 'req-1' } })).requestId).toBe(
      'req-1',
    );
  // Proxied answers are counted when their response closes, the gateway's own before they are sent.
  const m = await waitFor(
    async () => {
      const page = await scrape(metricsUrl as string);
      return valueOf(page, 'llmgw_gateway_requests_total', { model: 'm', status: '200' }) === 6 ? page : null;
    },
    { timeoutMs: 5000, what: 'the six proxied answers counted' },
  );
  const count = (labels: Record<string, string>): number => valueOf(m, 'llmgw_gateway_requests_total', labels);
  expect(count({ model: '', key: 'unauthorized', status: '401' })).toBe(4);
  expect(count({ model: 'idle', status: '503' })).toBe(2);
  expect(count({ model: '', status: '404' })).toBe(2);
  expect(count({ model: '', status: '413' })).toBe(4);
  expect(count({ model: '', status: '400' })).toBe(6);
  expect(count({})).toBe(6 + 4 + 2 + 2 + 4 + 6);
});

test('what the fast path does not take goes to fastify: other methods, paths and content types', async () => {
  const u = await upstream(engine());
  const { url } = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', u.endpoint)] }, { apiKeys: [KEY] });
  const form = await send(url, '/v1/chat/completions', {
    body: 'model=m',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
  expect(form.status).toBe(415);
  expect(JSON.parse(form.body).error.code).toBe('LLMGW_UNSUPPORTED_MEDIA_TYPE');
  // A JSON content type the fast path does not spell out itself: fastify's parser takes it and the request is served.
  const upper = await send(url, '/v1/chat/completions', {
    body: chatBody('m'),
    headers: { 'content-type': 'application/json;charset=UTF-8' },
  });
  expect(upper.status).toBe(200);
  expect(JSON.parse(upper.body).choices[0].message.content).toBe('hello');
  const trailing = await send(url, '/v1/chat/completions/', { body: chatBody('m') });
  expect(trailing.status).toBe(404);
  expect(JSON.parse(trailing.body).error.code).toBe('LLMGW_NOT_FOUND');
});
