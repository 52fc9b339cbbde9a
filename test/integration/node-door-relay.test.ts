/**
 * The node door's byte relay (gateway/node-door/relay.ts) on the wire: a real door over TLS with a gateway
 * certificate, raw TLS clients writing exact bytes, and engines that are a real node:http server (what it receives
 * is echoed back) or raw TCP servers answering exact bytes (answers ended by a close, cut mid-answer, closing a
 * kept-alive connection as the next request arrives).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as httpServer, type Server as HttpServer } from 'node:http';
import { createServer as tcpServer, type Server as TcpServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type TLSSocket } from 'node:tls';
import { startNodeDoor, type NodeDoor } from '../../gateway/node-door/door';
import { initCa, issueClientCertificate, issueNodeCertificate } from '../../lib/pki';
import { waitFor } from '../helpers/wait';

const NODE = 'node-r';
const tmp = mkdtempSync(join(tmpdir(), 'llmgw-door-relay-'));
const ca = initCa(join(tmp, 'ca'), { keyBits: 2048 });
const nodeCert = issueNodeCertificate(ca, NODE);
const gw = issueClientCertificate(ca, 'gateway', 'gw-r');

const serving = new Map<string, number>();
const engines: (HttpServer | TcpServer)[] = [];
const rawSockets: Socket[] = [];
let door: NodeDoor;
/** What the echo engine received, per request. */
const received: { method: string; url: string; host: string; te: string | null; body: string }[] = [];
/** Requests the echo engine had that were closed before their answer ended (a client that left). */
let leftEarly = 0;

const listen = async (s: HttpServer | TcpServer): Promise<number> => {
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  engines.push(s);
  return (s.address() as { port: number }).port;
};

/** A raw engine: `answer(request, socket, n)` for the n-th request (from 1) of each connection. */
const rawEngine = (answer: (req: string, sock: Socket, n: number) => void): TcpServer =>
  tcpServer((sock) => {
    rawSockets.push(sock);
    let buf = '';
    let n = 0;
    sock.on('error', () => undefined);
    sock.on('data', (c) => {
      buf += c.toString('latin1');
      let end: number;
      while ((end = buf.indexOf('\r\n\r\n')) >= 0) {
        const head = buf.slice(0, end + 4);
        const len = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        buf = buf.slice(end + 4 + len);
        answer(head, sock, ++n);
      }
    });
  });

/** A raw TLS client with the gateway certificate; `text` is everything read so far. */
class Client {
  text = '';
  closed = false;
  readonly sock: TLSSocket;
  constructor(port: number, certificate = true) {
    this.sock = connect({
      host: '127.0.0.1',
      port,
      ...(certificate ? { cert: gw.certPem, key: gw.keyPem } : {}),
      ca: ca.certPem,
      rejectUnauthorized: false,
    });
    this.sock.on('data', (c: Buffer) => void (this.text += c.toString('latin1')));
    this.sock.on('error', () => undefined);
    this.sock.on('close', () => void (this.closed = true));
  }
  write(s: string): void {
    this.sock.write(s, 'latin1');
  }
  async until(what: string, pred: () => boolean, timeoutMs = 5000): Promise<void> {
    await waitFor(async () => pred() || undefined, { timeoutMs, intervalMs: 10, what });
  }
  /** How many complete answers (by their status line) arrived. */
  answers(): number {
    return this.text.split('HTTP/1.1 ').length - 1;
  }
  end(): void {
    this.sock.destroy();
  }
}

const path = (replica: string, rest: string): string => `/nodes/${NODE}/replicas/${replica}${rest}`;

beforeAll(async () => {
  const echo = httpServer((req, res) => {
    let body = '';
    req.setEncoding('latin1');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      received.push({
        method: req.method ?? '',
        url: req.url ?? '',
        host: req.headers.host ?? '',
        te: (req.headers['transfer-encoding'] as string | undefined) ?? null,
        body,
      });
      if (req.url === '/slow') {
        // A stream that never ends on its own: the client's leaving must end it.
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: one\n\n');
        res.on('close', () => {
          if (!res.writableFinished) leftEarly++;
        });
        return;
      }
      const out = JSON.stringify({ method: req.method, url: req.url, body });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
      res.end(out);
    });
  });
  serving.set('echo', await listen(echo));
  // Answers with no length, ended by its close.
  serving.set(
    'untilclose',
    await listen(
      rawEngine((_req, sock) => {
        sock.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nhello ');
        setTimeout(() => sock.end('world'), 20);
      }),
    ),
  );
  // Promises 100 bytes, sends 10, and drops the connection.
  serving.set(
    'cut',
    await listen(
      rawEngine((_req, sock) => {
        sock.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\n0123456789');
        setTimeout(() => sock.destroy(), 20);
      }),
    ),
  );
  // Closes a kept-alive connection as its second request arrives (an engine's idle close in flight).
  serving.set(
    'staleclose',
    await listen(
      rawEngine((_req, sock, n) => {
        if (n > 1) return void sock.destroy();
        sock.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
      }),
    ),
  );
  // Answers as soon as a request's head arrives, before its body (as an engine refusing a request early does).
  serving.set(
    'early',
    await listen(
      tcpServer((sock) => {
        rawSockets.push(sock);
        sock.on('error', () => undefined);
        sock.once('data', () => sock.write('HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\n\r\nbig!'));
      }),
    ),
  );
  door = await startNodeDoor({
    nodeId: NODE,
    tls: { certPem: nodeCert.certPem, keyPem: nodeCert.keyPem, caPem: ca.certPem },
    host: '127.0.0.1',
    port: 0,
    replicaPort: (id) => serving.get(id) ?? null,
    replicas: () => [...serving.keys()],
  });
}, 60_000);

afterAll(async () => {
  await door?.close();
  for (const s of rawSockets) s.destroy();
  for (const e of engines) {
    (e as HttpServer).closeAllConnections?.();
    await new Promise((r) => e.close(r));
  }
  rmSync(tmp, { recursive: true, force: true });
});

test('a chunked body in odd pieces reaches the engine whole, on the engine path and Host, kept alive for the next', async () => {
  const c = new Client(door.port);
  const before = received.length;
  c.write(`POST ${path('echo', '/v1/x?q=1')} HTTP/1.1\r\nhost: door\r\ntransfer-encoding: chunked\r\n\r\n`);
  // Split inside a chunk's data, its size line and its CRLF.
  for (const piece of ['5\r', '\nhel', 'lo\r', '\n6\r\n wor', 'ld\r\n0\r', '\n\r\n'])
    await new Promise<void>((r) => c.sock.write(piece, 'latin1', () => setTimeout(r, 5)));
  await c.until('the echo answer', () => c.text.includes('"body":"hello world"'));
  expect(received[before]).toMatchObject({ method: 'POST', url: '/v1/x?q=1', te: 'chunked', body: 'hello world' });
  expect(received[before]?.host).toBe(`127.0.0.1:${serving.get('echo')}`);
  // The same connection serves the next request.
  c.write(
    `POST ${path('echo', '/v1/y')} HTTP/1.1\r\nhost: door\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}`,
  );
  await c.until('the second answer', () => c.text.includes('"url":"/v1/y"'));
  expect(c.closed).toBe(false);
  c.end();
});

test('two pipelined requests in one write are answered in order on one connection', async () => {
  const c = new Client(door.port);
  const req = (n: number): string =>
    `POST ${path('echo', `/v1/p${n}`)} HTTP/1.1\r\nhost: door\r\ncontent-length: 3\r\n\r\nb=${n}`;
  c.write(req(1) + req(2));
  await c.until('both answers', () => c.answers() === 2 && c.text.includes('"url":"/v1/p2"'));
  expect(c.text.indexOf('/v1/p1')).toBeLessThan(c.text.indexOf('/v1/p2'));
  c.end();
});

test("an answer the engine ends by closing reaches the client chunked, and the client's connection stays open", async () => {
  const c = new Client(door.port);
  c.write(`GET ${path('untilclose', '/x')} HTTP/1.1\r\nhost: door\r\n\r\n`);
  await c.until('the rechunked answer to end', () => c.text.endsWith('0\r\n\r\n'));
  expect(c.text).toMatch(/transfer-encoding: chunked/i);
  expect(c.text).not.toMatch(/connection: close/i);
  const body = c.text.slice(c.text.indexOf('\r\n\r\n') + 4);
  const data = body.replace(/([0-9a-f]+)\r\n([^]*?)\r\n/g, (_m, _n, d: string) => d).replace(/0\r\n\r\n$/, '');
  expect(data).toBe('hello world');
  c.text = '';
  c.write(`POST ${path('echo', '/v1/after')} HTTP/1.1\r\nhost: door\r\ncontent-length: 0\r\n\r\n`);
  await c.until('an answer on the same connection', () => c.text.includes('"url":"/v1/after"'));
  c.end();
});

test('an engine that fails mid-answer cuts the client connection: the answer never looks complete', async () => {
  const c = new Client(door.port);
  c.write(`GET ${path('cut', '/x')} HTTP/1.1\r\nhost: door\r\n\r\n`);
  await c.until('the connection to close', () => c.closed);
  expect(c.text).toContain('content-length: 100');
  expect(c.text.endsWith('0123456789')).toBe(true);
});

test('a kept-alive engine connection closed as the next request arrives: the request goes again on a fresh one', async () => {
  const c = new Client(door.port);
  for (let i = 0; i < 3; i++) {
    c.text = '';
    c.write(`GET ${path('staleclose', '/x')} HTTP/1.1\r\nhost: door\r\n\r\n`);
    await c.until(`answer ${i + 1}`, () => c.text.endsWith('\r\n\r\nok'));
    expect(c.text.startsWith('HTTP/1.1 200')).toBe(true);
  }
  c.end();
});

test('a client that leaves mid-stream takes its engine request with it', async () => {
  const before = leftEarly;
  const c = new Client(door.port);
  c.write(`POST ${path('echo', '/slow')} HTTP/1.1\r\nhost: door\r\ncontent-length: 0\r\n\r\n`);
  await c.until('the first event', () => c.text.includes('data: one'));
  c.end();
  await waitFor(async () => leftEarly > before || undefined, {
    timeoutMs: 5000,
    what: "the engine's request to be closed",
  });
});

test('Expect: 100-continue passes the interim answer on, then the final one', async () => {
  const c = new Client(door.port);
  c.write(`POST ${path('echo', '/v1/c')} HTTP/1.1\r\nhost: door\r\nexpect: 100-continue\r\ncontent-length: 4\r\n\r\n`);
  await c.until('100 Continue', () => c.text.startsWith('HTTP/1.1 100 Continue'));
  c.write('body');
  await c.until('the final answer', () => c.text.includes('"body":"body"'));
  c.end();
});

describe('requests the door cannot frame are refused with a clear answer, then the connection closes', () => {
  const cases: [string, string, number, RegExp][] = [
    [
      'Content-Length and Transfer-Encoding both',
      `POST ${path('echo', '/v1/x')} HTTP/1.1\r\nhost: d\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n`,
      400,
      /both Content-Length and Transfer-Encoding/,
    ],
    [
      'two different Content-Lengths',
      `POST ${path('echo', '/v1/x')} HTTP/1.1\r\nhost: d\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n`,
      400,
      /malformed Content-Length/,
    ],
    [
      'a coding other than chunked',
      `POST ${path('echo', '/v1/x')} HTTP/1.1\r\nhost: d\r\ntransfer-encoding: gzip\r\n\r\n`,
      501,
      /chunked only/,
    ],
    [
      'a folded header line',
      `GET ${path('echo', '/x')} HTTP/1.1\r\nhost: d\r\n folded\r\n\r\n`,
      400,
      /malformed header/,
    ],
    ['a malformed request line', `GET nothing\r\nhost: d\r\n\r\n`, 400, /malformed request line/],
    [
      'a head over 16 KiB',
      `GET ${path('echo', '/x')} HTTP/1.1\r\nx-big: ${'a'.repeat(17_000)}\r\n\r\n`,
      431,
      /larger than/,
    ],
    [
      'a malformed chunk size',
      `POST ${path('echo', '/v1/x')} HTTP/1.1\r\nhost: d\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n`,
      400,
      /malformed chunk size/,
    ],
  ];
  test.each(cases)('%s', async (_what, bytes, status, message) => {
    const c = new Client(door.port);
    c.write(bytes);
    await c.until('the refusal and the close', () => c.closed);
    expect(c.text.startsWith(`HTTP/1.1 ${status} `)).toBe(true);
    expect(c.text).toMatch(/connection: close/i);
    const body = JSON.parse(c.text.slice(c.text.indexOf('\r\n\r\n') + 4)) as { error: { message: string } };
    expect(body.error.message).toMatch(message);
  });
});

test('a replica the node does not hold is the door miss, and its body is read past: the connection serves on', async () => {
  const c = new Client(door.port);
  c.write(`POST ${path('gone', '/v1/x')} HTTP/1.1\r\nhost: d\r\ncontent-length: 5\r\n\r\nhello`);
  await c.until('the miss', () => c.text.includes('"code"'));
  expect(c.text.startsWith('HTTP/1.1 404 ')).toBe(true);
  expect(c.text).toMatch(/x-llmgw-door-miss: 1/i);
  c.text = '';
  c.write(`POST ${path('echo', '/v1/next')} HTTP/1.1\r\nhost: d\r\ncontent-length: 0\r\n\r\n`);
  await c.until('the next answer', () => c.text.includes('"url":"/v1/next"'));
  c.end();
});

test('a client refused for its certificate is answered and its connection closed; its body reaches no engine', async () => {
  const before = received.length;
  const c = new Client(door.port, false);
  c.write(`POST ${path('echo', '/v1/x')} HTTP/1.1\r\nhost: d\r\ncontent-length: 100\r\n\r\n${'x'.repeat(50)}`);
  await c.until('the refusal', () => c.text.includes('"code"'));
  expect(c.closed).toBe(false); // its body is read past first
  c.write('y'.repeat(50));
  await c.until('the close', () => c.closed);
  expect(c.text.startsWith('HTTP/1.1 401 ')).toBe(true);
  expect(c.text).toMatch(/connection: close/i);
  expect(received.length).toBe(before);
});

test('an engine that answers before the whole body: the answer passes, the rest of the body is read past, then the close', async () => {
  const c = new Client(door.port);
  c.write(`POST ${path('early', '/v1/x')} HTTP/1.1\r\nhost: d\r\ncontent-length: 100\r\n\r\n${'x'.repeat(10)}`);
  await c.until('the early answer', () => c.text.endsWith('big!'));
  expect(c.text.startsWith('HTTP/1.1 413 ')).toBe(true);
  expect(c.closed).toBe(false);
  c.write('y'.repeat(90));
  await c.until('the close once the body is in', () => c.closed);
});
