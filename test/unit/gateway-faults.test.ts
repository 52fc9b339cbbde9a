/**
 * The gateway when replicas fail, against real upstream HTTP servers: timeouts end in typed errors, a stream cut
 * after its first byte ends with an error event, a replica that refuses connections is skipped (and taken back),
 * and every warning names its request id.
 */
import { createServer, request, type ServerResponse } from 'node:http';
import OpenAI from 'openai';
import { SseTail } from '../../gateway/inference/sse';
import { RoutingTable } from '../../gateway/inference/routing';
import { requestId } from '../../gateway/inference/log';
import { freePort } from '../helpers/ports';
import { TEST_API_KEY } from '../helpers/test-key';
import { waitFor } from '../helpers/wait';
import {
  chat,
  chunk,
  closeAll,
  completion,
  engine,
  gateway,
  post,
  ready,
  upstream,
  type LogLine,
} from '../helpers/gateway';

afterEach(closeAll);

// Tight for the gateway, generous for the client: a busy 2-core machine must not turn either into a flake.
const FAST = { connectMs: 500, firstByteMs: 300, idleMs: 300, requestMs: 60_000 } as const;
const CLIENT_DEADLINE_MS = 20_000;
const errorOf = async (r: Response): Promise<{ message: string; type: string; code: string }> =>
  ((await r.json()) as { error: { message: string; type: string; code: string } }).error;
const linesWith = (lines: LogLine[], msg: string): LogLine[] => lines.filter((l) => l.msg.startsWith(msg));

describe('timeouts', () => {
  it('answers 504 LLMGW_UPSTREAM_TIMEOUT when the only replica accepts the request and never answers', async () => {
    const held: ServerResponse[] = [];
    const hung = await upstream((_req, res) => void held.push(res));
    const { url, routing, lines } = await gateway(
      { models: ['m'], replicas: [ready('m-0', 'm', hung.endpoint)] },
      { timeouts: FAST },
    );
    const r = await post(`${url}/v1/chat/completions`, chat('m'), {
      signal: AbortSignal.timeout(CLIENT_DEADLINE_MS),
      headers: { 'x-request-id': 'hang-1' },
    });
    expect(r.status).toBe(504);
    expect(await errorOf(r)).toEqual({
      message: expect.stringContaining('m-0: no answer within 300 ms'),
      type: 'server_error',
      code: 'LLMGW_UPSTREAM_TIMEOUT',
    });
    expect(r.headers.get('x-request-id')).toBe('hang-1');
    // The replica's request is cut, not left running, and the in-flight count is back to zero.
    await waitFor(() => hung.closedEarly === 1, {
      timeoutMs: 5000,
      intervalMs: 10,
      what: 'the hung request to be closed',
    });
    expect(routing.inFlightOf('m-0')).toBe(0);
    expect(linesWith(lines, 'request failed')).toEqual([
      expect.objectContaining({ level: 'error', reqId: 'hang-1', code: 'LLMGW_UPSTREAM_TIMEOUT' }),
    ]);
    // A hang is not a refused connection: the replica is not ejected.
    expect(routing.isEjected('m-0')).toBe(false);
  });

  it("tries another replica after a first-byte timeout, and uses the model's own firstByteMs from the routing rows", async () => {
    const hung = await upstream(() => undefined);
    const good = await upstream(engine());
    const rows = {
      models: ['m'],
      replicas: [ready('m-0', 'm', hung.endpoint), ready('m-1', 'm', good.endpoint)],
      firstByteMs: { m: 200 },
    };
    // The gateway-wide first-byte timeout is far beyond the client's deadline: only the model's 200 ms can answer in time.
    const { url, lines } = await gateway(rows, { timeouts: { ...FAST, firstByteMs: 600_000 } });
    for (let i = 0; i < 2; i++) {
      const r = await post(`${url}/v1/chat/completions`, chat('m'), {
        signal: AbortSignal.timeout(CLIENT_DEADLINE_MS),
      });
      expect(r.status).toBe(200);
      expect(await r.text()).toBe(completion('m'));
    }
    expect(good.hits).toHaveLength(2);
    // Round robin goes on where the first request left it: the second request starts at m-1.
    expect(hung.hits).toHaveLength(1);
    expect(linesWith(lines, 'retrying on another replica')).toEqual([
      expect.objectContaining({
        level: 'warn',
        failed: 'm-0',
        next: 'm-1',
        error: 'm-0: no answer within 200 ms',
        reqId: expect.any(String),
      }),
    ]);
  });

  it('ends a stream whose first event never comes (after its headers) with a timeout error event', async () => {
    const up = await upstream(
      (_req, res) => void res.writeHead(200, { 'content-type': 'text/event-stream' }).flushHeaders(),
    );
    const { url } = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', up.endpoint)] }, { timeouts: FAST });
    const r = await post(`${url}/v1/chat/completions`, chat('m', { stream: true }), {
      signal: AbortSignal.timeout(CLIENT_DEADLINE_MS),
    });
    expect(r.status).toBe(200);
    const text = await r.text();
    expect(text).toMatch(
      /^data: \{"error":\{"message":"model m: m-0: no answer within 300 ms; the answer is incomplete","type":"server_error","code":"LLMGW_UPSTREAM_TIMEOUT"\}\}\n\ndata: \[DONE\]\n\n$/,
    );
  });

  it('ends a stream that stalls mid-answer with an error event the openai client raises, code and all', async () => {
    const up = await upstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(chunk('m', 'Hel'));
      res.write(chunk('m', 'lo'));
    });
    const { url, routing } = await gateway(
      { models: ['m'], replicas: [ready('m-0', 'm', up.endpoint)] },
      { timeouts: FAST },
    );
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0, timeout: CLIENT_DEADLINE_MS });
    const stream = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    });
    let text = '';
    const err = await (async (): Promise<unknown> => {
      try {
        for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
      } catch (e) {
        return e;
      }
      return null;
    })();
    expect(text).toBe('Hello');
    expect(err).toMatchObject({
      code: 'LLMGW_UPSTREAM_TIMEOUT',
      message: expect.stringContaining('the answer stalled, no data for 300 ms'),
    });
    await waitFor(() => routing.inFlightOf('m-0') === 0, {
      timeoutMs: 5000,
      intervalMs: 10,
      what: 'm-0 to be released',
    });
  });
});

describe('an answer cut after its first byte', () => {
  it('ends a stream cut between two events with exactly one error event and [DONE]', async () => {
    const up = await upstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(chunk('m', 'tick'), () => setTimeout(() => res.destroy(), 20));
    });
    const { url, lines } = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', up.endpoint)] });
    const r = await post(`${url}/v1/chat/completions`, chat('m', { stream: true }), {
      headers: { 'x-request-id': 'cut-1' },
      signal: AbortSignal.timeout(CLIENT_DEADLINE_MS),
    });
    expect(r.status).toBe(200);
    const error = {
      error: {
        message: 'model m: m-0 closed the connection mid-answer; the answer is incomplete',
        type: 'server_error',
        code: 'LLMGW_UPSTREAM_FAILED',
      },
    };
    expect(await r.text()).toBe(`${chunk('m', 'tick')}data: ${JSON.stringify(error)}\n\ndata: [DONE]\n\n`);
    expect(linesWith(lines, 'answer cut')).toEqual([
      expect.objectContaining({ level: 'error', reqId: 'cut-1', replica: 'm-0', code: 'LLMGW_UPSTREAM_FAILED' }),
    ]);
  });

  it('cuts a non-streamed answer that stops half way, so it never looks complete', async () => {
    const up = await upstream((_req, res) => {
      const body = completion('m');
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.write(body.slice(0, 20), () => setTimeout(() => res.destroy(), 20));
    });
    const { url } = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', up.endpoint)] });
    const r = await post(`${url}/v1/chat/completions`, chat('m'), { signal: AbortSignal.timeout(CLIENT_DEADLINE_MS) });
    expect(r.status).toBe(200);
    await expect(r.text()).rejects.toThrow();
  });

  it('knows a stream that stopped between events from one that stopped inside one', () => {
    const t = new SseTail();
    expect(t.atBoundary()).toBe(true);
    for (const [bytes, boundary] of [
      ['data: {"a"', false],
      [':1}\n', false],
      ['\n', true],
      ['data: x\r\n', false],
      ['\r\n', true],
      ['data: {}\n\n', true],
    ] as const) {
      t.push(Buffer.from(bytes));
      expect([bytes, t.atBoundary()]).toEqual([bytes, boundary]);
    }
  });
});

describe('passive ejection', () => {
  it('skips a replica that refuses connections from the next request on', async () => {
    const good = await upstream(engine());
    const refused = `http://127.0.0.1:${await freePort()}`;
    // An ejection longer than the test: whatever the machine's speed, no request below finds it expired.
    const { url, routing, lines } = await gateway(
      { models: ['m'], replicas: [ready('m-0', 'm', refused), ready('m-1', 'm', good.endpoint)] },
      { routing: { ejectMs: 60_000 } },
    );
    // Round robin starts at m-0: refused, retried on m-1, and m-0 is ejected.
    expect((await post(`${url}/v1/chat/completions`, chat('m'))).status).toBe(200);
    expect(linesWith(lines, 'replica ejected')).toEqual([
      expect.objectContaining({
        level: 'warn',
        replica: 'm-0',
        endpoint: refused,
        forMs: 60_000,
        error: expect.stringContaining('ECONNREFUSED'),
      }),
    ]);
    expect(linesWith(lines, 'retrying')).toHaveLength(1);
    for (let i = 0; i < 5; i++) expect((await post(`${url}/v1/chat/completions`, chat('m'))).status).toBe(200);
    // No request tried m-0 again, so none had to be retried.
    expect(linesWith(lines, 'retrying')).toHaveLength(1);
    expect(good.hits).toHaveLength(6);
    expect(routing.isEjected('m-0')).toBe(true);
  });

  it('takes an ejected replica back when a request after the ejection finds it answering', async () => {
    const port = await freePort();
    const { url, routing, lines } = await gateway(
      { models: ['m'], replicas: [ready('m-0', 'm', `http://127.0.0.1:${port}`)] },
      { routing: { ejectMs: 100 } },
    );
    expect((await post(`${url}/v1/chat/completions`, chat('m'))).status).toBe(502);
    expect(linesWith(lines, 'replica ejected')).toHaveLength(1);
    // It comes back on its port (an engine restarted in place).
    const revived = createServer(
      (_req, res) => void res.writeHead(200, { 'content-type': 'application/json' }).end(completion('m', 'back')),
    );
    await new Promise<void>((r) => revived.listen(port, '127.0.0.1', r));
    try {
      await waitFor(async () => (await (await post(`${url}/v1/chat/completions`, chat('m'))).text()).includes('back'), {
        timeoutMs: 10_000,
        intervalMs: 20,
        what: 'a request to reach the revived m-0',
      });
      expect(linesWith(lines, 'replica taken back')).toEqual([
        expect.objectContaining({ level: 'info', replica: 'm-0' }),
      ]);
      expect(routing.isEjected('m-0')).toBe(false);
    } finally {
      revived.closeAllConnections();
      revived.close();
    }
  });

  it('never ejects for an HTTP error answer or a client that leaves', async () => {
    const held: ServerResponse[] = [];
    const failing = await upstream((req, res) => {
      if (req.url === '/v1/completions') return void held.push(res);
      res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":{"message":"boom"}}');
    });
    const { url, routing } = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', failing.endpoint)] });
    const five = await post(`${url}/v1/chat/completions`, chat('m'));
    expect(five.status).toBe(500);
    await five.text();
    // node:http rather than fetch: after an abort, fetch opens a spare connection that holds the gateway's close for 4 s.
    const leaving = request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
    });
    leaving.on('error', () => undefined);
    leaving.end(JSON.stringify({ model: 'm', prompt: 'x' }));
    await waitFor(() => held.length === 1, { timeoutMs: 5000, intervalMs: 10, what: 'the request to reach m-0' });
    leaving.destroy();
    await waitFor(() => failing.closedEarly === 1, {
      timeoutMs: 5000,
      intervalMs: 10,
      what: 'the upstream request to be cut',
    });
    expect(routing.isEjected('m-0')).toBe(false);
  });

  it('ejects for a while, doubling while it keeps failing, counts a burst once, and still tries when every replica is ejected', async () => {
    const lines: LogLine[] = [];
    const rows = {
      models: ['m'],
      replicas: [ready('a', 'm', 'http://127.0.0.1:1'), ready('b', 'm', 'http://127.0.0.1:2')],
    };
    let current = rows;
    let now = 1_000_000;
    const routing = new RoutingTable(async () => current, {
      refreshMs: 60_000,
      ejectMs: 50,
      ejectMaxMs: 150,
      clock: () => now,
      log: (msg, f) => void lines.push({ msg, ...f }),
    });
    await routing.refresh();
    const a = { id: 'a', endpoint: 'http://127.0.0.1:1', host: '127.0.0.1', port: 1 };
    const b = { id: 'b', endpoint: 'http://127.0.0.1:2', host: '127.0.0.1', port: 2 };
    const picks = (n: number): string[] =>
      Array.from({ length: n }, () => {
        const p = routing.pick('m');
        return p.kind === 'ok' ? p.replica.id : p.kind;
      });
    routing.eject(a, 'connect ECONNREFUSED');
    routing.eject(a, 'connect ECONNREFUSED'); // the other requests of the same burst
    expect(picks(4)).toEqual(['b', 'b', 'b', 'b']);
    expect(linesWith(lines, 'replica ejected').map((l) => l.forMs)).toEqual([50]);
    // Every replica ejected: pick still answers, rather than a 503 with no attempt.
    routing.eject(b, 'connect ECONNREFUSED');
    expect(routing.pick('m').kind).toBe('ok');
    routing.healthy('b');
    expect(routing.isEjected('b')).toBe(false);
    expect(linesWith(lines, 'replica taken back')).toEqual([expect.objectContaining({ replica: 'b' })]);
    now += 60;
    // Past its time, one request may try a again; the next ones skip it until that one answers or fails.
    expect(picks(3).filter((id) => id === 'a')).toHaveLength(1);
    routing.eject(a, 'connect ECONNREFUSED'); // the trial failed
    now += 110;
    routing.eject(a, 'connect ECONNREFUSED');
    expect(
      linesWith(lines, 'replica ejected')
        .filter((l) => l.replica === 'a')
        .map((l) => l.forMs),
    ).toEqual([50, 100, 150]);
    // A replica rebuilt on another endpoint starts afresh.
    current = { ...rows, replicas: [ready('a', 'm', 'http://127.0.0.1:3'), ready('b', 'm', b.endpoint)] };
    await routing.refresh();
    expect(routing.isEjected('a')).toBe(false);
  });
});

describe('request ids and logs', () => {
  it('echoes a sane x-request-id and passes it to the replica, and makes one up otherwise', async () => {
    const up = await upstream(engine());
    const { url } = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', up.endpoint)] });
    const mine = await post(`${url}/v1/chat/completions`, chat('m'), { headers: { 'x-request-id': 'client-42' } });
    expect(mine.headers.get('x-request-id')).toBe('client-42');
    expect(up.headers[0]?.['x-request-id']).toBe('client-42');
    for (const bad of [undefined, 'has space', 'x'.repeat(129)]) {
      const r = await post(`${url}/v1/chat/completions`, chat('m'), {
        headers: bad === undefined ? {} : { 'x-request-id': bad },
      });
      expect(r.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    }
    // The gateway's own answers carry it too.
    const unknown = await post(`${url}/v1/chat/completions`, chat('nope'), {
      headers: { 'x-request-id': 'client-43' },
    });
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get('x-request-id')).toBe('client-43');
    expect(requestId(['a', 'b'])).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('writes one access line per request when the access log is on', async () => {
    const up = await upstream(engine());
    const { url, lines } = await gateway(
      { models: ['m'], replicas: [ready('m-0', 'm', up.endpoint)] },
      { accessLog: true },
    );
    const plain = await post(`${url}/v1/chat/completions`, chat('m'), { headers: { 'x-request-id': 'a-1' } });
    const plainBytes = Buffer.byteLength(await plain.text());
    const streamed = await (
      await post(`${url}/v1/chat/completions`, chat('m', { stream: true }), { headers: { 'x-request-id': 'a-2' } })
    ).text();
    await (await fetch(`${url}/v1/models`, { headers: { 'x-request-id': 'a-3' } })).text();
    await waitFor(() => linesWith(lines, 'request').length === 3, {
      timeoutMs: 5000,
      intervalMs: 10,
      what: 'three access lines',
    });
    const access = linesWith(lines, 'request').sort((x, y) => String(x.reqId).localeCompare(String(y.reqId)));
    expect(access).toEqual([
      {
        msg: 'request',
        level: 'info',
        reqId: 'a-1',
        method: 'POST',
        path: '/v1/chat/completions',
        model: 'm',
        replica: 'm-0',
        status: 200,
        ms: expect.any(Number),
        bytes: plainBytes,
      },
      {
        msg: 'request',
        level: 'info',
        reqId: 'a-2',
        method: 'POST',
        path: '/v1/chat/completions',
        model: 'm',
        replica: 'm-0',
        status: 200,
        ms: expect.any(Number),
        bytes: Buffer.byteLength(streamed),
      },
      expect.objectContaining({
        reqId: 'a-3',
        method: 'GET',
        path: '/v1/models',
        status: 200,
        bytes: expect.any(Number),
      }),
    ]);
  });

  it('serves its last table through a store outage and says so once when it goes stale and once when it recovers', async () => {
    const lines: LogLine[] = [];
    let down = false;
    let loads = 0;
    const routing = new RoutingTable(
      async () => {
        loads++;
        if (down) throw new Error('connect ECONNREFUSED 127.0.0.1:3306');
        return { models: ['m'], replicas: [ready('m-0', 'm', 'http://127.0.0.1:1')] };
      },
      { refreshMs: 20, log: (msg, f) => void lines.push({ msg, ...f }) },
    );
    await routing.start();
    try {
      down = true;
      const from = loads;
      await waitFor(() => loads >= from + 5, { timeoutMs: 10_000, intervalMs: 10, what: 'five failed refreshes' });
      expect(linesWith(lines, 'routing table stale')).toEqual([
        expect.objectContaining({ level: 'warn', error: 'connect ECONNREFUSED 127.0.0.1:3306' }),
      ]);
      expect(routing.pick('m')).toMatchObject({ kind: 'ok', replica: { id: 'm-0' } });
      down = false;
      await waitFor(() => linesWith(lines, 'routing table fresh again').length > 0, {
        timeoutMs: 10_000,
        intervalMs: 10,
        what: 'the table to be fresh again',
      });
      const back = loads;
      await waitFor(() => loads >= back + 3, { timeoutMs: 10_000, intervalMs: 10, what: 'three good refreshes' });
      expect(lines.map((l) => l.msg.split(':')[0])).toEqual(['routing table stale', 'routing table fresh again']);
    } finally {
      routing.stop();
    }
  });
});

describe('backpressure', () => {
  it('passes a large answer to a client that reads slowly whole, pausing the replica instead of buffering it', async () => {
    // 32 MiB in 64 KiB chunks, each written only when the replica's socket takes it (as an engine's server does).
    const CHUNKS = 512;
    const piece = Buffer.alloc(64 * 1024, 'x');
    let written = 0;
    const big = await upstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(CHUNKS * piece.length) });
      const more = (): void => {
        while (written < CHUNKS) {
          written++;
          if (!res.write(piece)) return void res.once('drain', more);
        }
        res.end();
      };
      more();
    });
    const { url, routing } = await gateway({ models: ['m'], replicas: [ready('m-0', 'm', big.endpoint)] });
    const u = new URL(`${url}/v1/chat/completions`);
    const body = chat('m');
    const { received, writtenWhilePaused } = await new Promise<{ received: number; writtenWhilePaused: number }>(
      (resolve, reject) => {
        const req = request(
          {
            host: u.hostname,
            port: u.port,
            path: u.pathname,
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${TEST_API_KEY}` },
          },
          (res) => {
            let got = 0;
            let atPause = -1;
            res.once('data', (c: Buffer) => {
              if (res.statusCode !== 200) return reject(new Error(`${res.statusCode}: ${c.toString()}`));
              got += c.length;
              // The client stops reading for a second: the gateway must stop reading from the replica meanwhile.
              res.pause();
              setTimeout(() => {
                atPause = written;
                res.on('data', (d: Buffer) => (got += d.length));
                res.resume();
              }, 1000);
            });
            res.once('end', () => resolve({ received: got, writtenWhilePaused: atPause }));
            res.once('error', reject);
          },
        );
        req.once('error', reject);
        req.end(body);
      },
    );
    expect(received).toBe(CHUNKS * piece.length);
    // Paused for a second, the replica got no further than the socket buffers on its way (a few MiB), not 32 MiB.
    expect(writtenWhilePaused).toBeGreaterThan(0);
    expect(writtenWhilePaused).toBeLessThan(CHUNKS / 2);
    expect(routing.inFlightOf('m-0')).toBe(0);
  });
});
