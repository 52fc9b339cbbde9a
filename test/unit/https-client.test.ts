/**
 * lib/https-client.ts, the client `llmgw ctl` reaches the control plane with, over real mutual TLS on loopback
 * (node:https server, a real CA): it presents its certificate and reads answers whole, reuses one keep-alive
 * connection, trusts only its CA, rejects with the signal's reason on a timeout and with Node's own error when
 * nothing listens (callControl says so), and an idle connection does not keep a process alive. And
 * TlsClient.request, the agent's path to its control planes, answers the same way on the same server; past its
 * timeout it gives up waiting but keeps the connection (a slow server is not sent a new handshake per call), and a
 * request with no answer at all has its connection closed after closeAfterMs.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { callControl } from '../../cli/control-api';
import { HttpsClient } from '../../lib/https-client';
import { initCa, issueNodeCertificate, issueServerCertificate } from '../../lib/pki';
import { TlsClient, type TlsCredentials } from '../../lib/tls-client';

const ROOT = resolve(__dirname, '../..');

describe('HttpsClient', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-https-client-'));
  let server: Server;
  let url = '';
  let connections = 0;
  let creds: TlsCredentials;
  let foreignCaPem = '';
  const clients: HttpsClient[] = [];
  const client = (c: TlsCredentials = creds): HttpsClient => {
    const x = new HttpsClient(c);
    clients.push(x);
    return x;
  };

  beforeAll(async () => {
    const ca = initCa(join(dir, 'ca'), { keyBits: 2048 });
    foreignCaPem = initCa(join(dir, 'other'), { keyBits: 2048 }).certPem;
    const op = issueNodeCertificate(ca, 'ops-alice');
    creds = { certPem: op.certPem, keyPem: op.keyPem, caPem: ca.certPem };
    const srv = issueServerCertificate(ca, 'control-plane', ['127.0.0.1']);
    server = createServer(
      { cert: srv.certPem, key: srv.keyPem, ca: ca.certPem, requestCert: true, rejectUnauthorized: true },
      (req, res) => {
        let body = '';
        req.setEncoding('utf8').on('data', (d: string) => (body += d));
        req.on('end', () => {
          if (req.url === '/hang') return; // never answers
          if (req.url === '/half') return void res.writeHead(200).write('{"half":'); // answers, never ends
          if (req.url === '/slow') return void setTimeout(() => res.end('{"slow":true}'), 600);
          const cn = (req.socket as TLSSocket).getPeerCertificate().subject?.CN;
          res.writeHead(req.url === '/fail' ? 500 : 200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ method: req.method, url: req.url, body, cn, type: req.headers['content-type'] }));
        });
      },
    );
    server.on('secureConnection', () => connections++);
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    for (const c of clients) c.close();
    server.closeAllConnections();
    await new Promise((done) => server.close(done));
    rmSync(dir, { recursive: true, force: true });
  });

  test('presents its certificate, sends the body, reads the answer whole, on one keep-alive connection', async () => {
    const c = client();
    const before = connections;
    const get = await c.fetch(`${url}/v1/nodes`);
    expect(get).toMatchObject({ ok: true, status: 200 });
    expect(await get.json()).toEqual({ method: 'GET', url: '/v1/nodes', body: '', cn: 'ops-alice' });
    const post = await c.fetch(`${url}/v1/x`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ é: 'ü' }),
    });
    expect(JSON.parse(await post.text())).toEqual({
      method: 'POST',
      url: '/v1/x',
      body: '{"é":"ü"}',
      cn: 'ops-alice',
      type: 'application/json',
    });
    const failed = await c.fetch(`${url}/fail`);
    expect(failed).toMatchObject({ ok: false, status: 500 });
    expect(connections - before).toBe(1);
  });

  test('trusts only its CA', async () => {
    await expect(client({ ...creds, caPem: foreignCaPem }).fetch(`${url}/v1/nodes`)).rejects.toThrow(
      /self[- ]signed|unable to (verify|get)/i,
    );
  });

  test("a timeout rejects with the signal's reason; nothing listening rejects with Node's error, which callControl names", async () => {
    const c = client();
    await expect(c.fetch(`${url}/hang`, { signal: AbortSignal.timeout(300) })).rejects.toMatchObject({
      name: 'TimeoutError',
    });
    const aborted = new AbortController();
    aborted.abort(new Error('given up'));
    await expect(c.fetch(`${url}/v1/nodes`, { signal: aborted.signal })).rejects.toThrow('given up');

    const free = createNetServer();
    await new Promise<void>((done) => free.listen(0, '127.0.0.1', done));
    const port = (free.address() as AddressInfo).port;
    await new Promise((done) => free.close(done));
    const down = `https://127.0.0.1:${port}`;
    await expect(c.fetch(`${down}/v1/nodes`)).rejects.toThrow(`connect ECONNREFUSED 127.0.0.1:${port}`);
    await expect(callControl({ server: down, fetch: c.fetch }, '/v1/nodes')).rejects.toThrow(
      `cannot reach the control plane at ${down} (connect ECONNREFUSED 127.0.0.1:${port}): is it running? pass --server URL`,
    );
  });

  test('an idle keep-alive connection does not keep the process alive', async () => {
    const script = `
      const { HttpsClient } = require(${JSON.stringify(join(ROOT, 'lib/https-client.ts'))});
      new HttpsClient(JSON.parse(process.env.CREDS)).fetch(process.env.URL + '/v1/nodes')
        .then((r) => r.json()).then((b) => console.log(b.cn));`;
    // Asynchronously: this process serves the request. Killed after 30 s if the connection held it open.
    const r = await new Promise<{ code: number | null; signal: string | null; out: string; err: string }>((done) => {
      const child = execFile(
        process.execPath,
        ['--import', 'tsx', '-e', script],
        { env: { ...process.env, CREDS: JSON.stringify(creds), URL: url }, encoding: 'utf8', timeout: 30_000 },
        (_e, out, err) => done({ code: child.exitCode, signal: child.signalCode, out, err }),
      );
    });
    expect(r).toEqual({ code: 0, signal: null, out: 'ops-alice\n', err: '' });
  });

  test("TlsClient.request (the agent's heartbeat path): certificate, body, status, one connection, timeouts and refusals as fetch", async () => {
    const c = new TlsClient(creds);
    try {
      // undici opens a second connection for a request sent while the first's is still settling; from then on
      // the open ones are reused.
      for (let i = 0; i < 2; i++) await (await c.request(`${url}/v1/nodes`)).text();
      const before = connections;
      const post = await c.request(`${url}/v1/agent/heartbeat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ nodeId: 'é' }),
      });
      expect(post).toMatchObject({ ok: true, status: 200 });
      expect(await post.json()).toEqual({
        method: 'POST',
        url: '/v1/agent/heartbeat',
        body: '{"nodeId":"é"}',
        cn: 'ops-alice',
        type: 'application/json',
      });
      const failed = await c.request(`${url}/fail`);
      expect(failed).toMatchObject({ ok: false, status: 500 });
      await failed.body?.cancel(); // let go unread: the connection is free for the next request
      expect(JSON.parse(await (await c.request(`${url}/v1/nodes`)).text())).toMatchObject({
        method: 'GET',
        cn: 'ops-alice',
      });
      expect(connections - before).toBe(0);

      await expect(c.request(`${url}/hang`, { signal: AbortSignal.timeout(300) })).rejects.toMatchObject({
        name: 'TimeoutError',
      });
      // timeoutMs (the agent's: no AbortSignal per call) bounds the answer and the body's reading alike.
      const timedOut = { name: 'TimeoutError', message: 'no answer within 300 ms' };
      await expect(c.request(`${url}/hang`, { timeoutMs: 300 })).rejects.toMatchObject(timedOut);
      const half = await c.request(`${url}/half`, { timeoutMs: 300 });
      expect(half.status).toBe(200);
      await expect(half.text()).rejects.toMatchObject(timedOut);
      expect(await (await c.request(`${url}/v1/nodes`, { timeoutMs: 300 })).json()).toMatchObject({ cn: 'ops-alice' });
      const free = createNetServer();
      await new Promise<void>((done) => free.listen(0, '127.0.0.1', done));
      const port = (free.address() as AddressInfo).port;
      await new Promise((done) => free.close(done));
      await expect(c.request(`https://127.0.0.1:${port}/v1/nodes`)).rejects.toThrow(
        `connect ECONNREFUSED 127.0.0.1:${port}`,
      );
      // Its one TLS context trusts only its CA.
      const foreign = new TlsClient({ ...creds, caPem: foreignCaPem });
      await expect(foreign.request(`${url}/v1/nodes`)).rejects.toThrow(/self[- ]signed|unable to (verify|get)/i);
      await foreign.close();
    } finally {
      await c.close();
    }
  });

  test('TlsClient.request past its timeout: the caller is answered at once, the connection stays for the next call; no answer at all closes it after closeAfterMs', async () => {
    const c = new TlsClient(creds, { connections: 1, closeAfterMs: 1500 });
    try {
      await (await c.request(`${url}/v1/nodes`)).text();
      const before = connections;
      const t0 = Date.now();
      await expect(c.request(`${url}/slow`, { timeoutMs: 200 })).rejects.toMatchObject({
        name: 'TimeoutError',
        message: 'no answer within 200 ms',
      });
      expect(Date.now() - t0).toBeLessThan(550); // not the answer's 600 ms
      // The next call waits for the one connection (its slow answer is read and dropped), then is answered on it.
      const next = await c.request(`${url}/v1/nodes`, { timeoutMs: 5000 });
      expect(await next.json()).toMatchObject({ url: '/v1/nodes', cn: 'ops-alice' });
      expect(connections - before).toBe(0);

      // No answer at all: the connection is closed at closeAfterMs, and the next call gets a new one.
      await expect(c.request(`${url}/hang`)).rejects.toMatchObject({ code: 'UND_ERR_HEADERS_TIMEOUT' });
      expect(await (await c.request(`${url}/v1/nodes`)).json()).toMatchObject({ cn: 'ops-alice' });
      expect(connections - before).toBe(1);
    } finally {
      await c.close();
    }
  });
});
