/** The sim engine: a real HTTP server speaking the engines' OpenAI-compatible API, with fake tokens. */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { openAiError, type ErrorCode, ERRORS } from '../errors';
import { formGroup } from './group';
import { chunkBody, completionBody, fakeToken, parseSimRequest, promptSeed, usageChunk, usageOf, type SimEndpoint, type SimRequest } from './openai';

export interface SimOptions {
  model: string;
  host: string;
  port: number;
  rank: number;
  world: number;
  distHost: string;
  distPort: number;
  /** 0 = as fast as possible */
  tokensPerSecond: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface SimEngine {
  /** Bound HTTP port (rank 0), 0 for worker ranks */
  port: number;
  distPort: number;
  ready(): boolean;
  inFlight(): number;
  /** Stops taking requests, lets in-flight ones finish (bounded), closes. */
  close(): Promise<void>;
  /** Resolves when the group breaks: the process should exit with `code`. */
  exited: Promise<{ code: number; reason: string }>;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Starts one rank of a sim engine. */
export async function startSimEngine(o: SimOptions): Promise<SimEngine> {
  const log = o.log ?? ((): void => undefined);
  const group = await formGroup({ rank: o.rank, world: o.world, distHost: o.distHost, distPort: o.distPort });
  let broken: string | null = null;
  const exited = group.broken.then((reason) => {
    broken = reason;
    log('group broken', { reason });
    return { code: 3, reason };
  });
  if (o.rank > 0) {
    log('joined group', { rank: o.rank, world: o.world, distHost: o.distHost, distPort: o.distPort });
    return { port: 0, distPort: 0, ready: () => !broken, inFlight: () => 0, close: async () => group.close(), exited };
  }
  let inFlight = 0;
  let draining = false;
  const ready = (): boolean => group.ready() && !broken && !draining;
  const delay = o.tokensPerSecond > 0 ? 1000 / o.tokensPerSecond : 0;

  const fail = (res: ServerResponse, code: ErrorCode, message: string, status?: number): void => {
    res.writeHead(status ?? ERRORS[code].status, { 'content-type': 'application/json' }).end(JSON.stringify(openAiError(code, message)));
  };
  const notReady = (): string => (broken ? `engine stopped: ${broken}` : draining ? 'engine is shutting down' : `waiting for ranks: ${group.joined()} of ${o.world - 1} workers joined`);

  const complete = async (req: SimRequest, res: ServerResponse): Promise<void> => {
    const id = `${req.endpoint === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID()}`;
    const created = Math.floor(Date.now() / 1000);
    const seed = promptSeed(req.promptText);
    if (!req.stream) {
      let text = '';
      for (let i = 0; i < req.maxTokens; i++) {
        if (delay) await sleep(delay);
        text += fakeToken(seed, i);
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(completionBody(req, id, created, text, usageOf(req, req.maxTokens))));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    res.flushHeaders();
    const send = (obj: unknown): boolean => res.write(`data: ${JSON.stringify(obj)}\n\n`);
    let closed = false;
    res.once('close', () => void (closed = true));
    if (req.endpoint === 'chat') send(chunkBody(req, id, created, { text: '', role: true }));
    let n = 0;
    for (; n < req.maxTokens && !closed && !broken; n++) {
      if (delay) await sleep(delay);
      send(chunkBody(req, id, created, { text: fakeToken(seed, n) }));
    }
    if (broken) {
      res.destroy();
      return;
    }
    send(chunkBody(req, id, created, { text: '', finish: true }));
    if (req.includeUsage) send(usageChunk(req, id, created, usageOf(req, n)));
    res.end('data: [DONE]\n\n');
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && url === '/health') {
      const ok = ready();
      res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' })
        .end(JSON.stringify(ok ? { status: 'ok' } : { status: 'not ready', reason: notReady(), joined: group.joined(), world: o.world }));
      return;
    }
    if (req.method === 'GET' && url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ object: 'list', data: [{ id: o.model, object: 'model', created: 0, owned_by: 'sim' }] }));
      return;
    }
    const endpoint: SimEndpoint | null = url === '/v1/chat/completions' ? 'chat' : url === '/v1/completions' ? 'text' : null;
    if (req.method !== 'POST' || !endpoint) return fail(res, 'LLMGW_BAD_REQUEST', `no route ${req.method} ${url}`, 404);
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (!ready()) return fail(res, 'LLMGW_NO_READY_REPLICA', notReady(), 503);
    const parsed = parseSimRequest(endpoint, Buffer.concat(chunks).toString('utf8'), o.model);
    if (parsed.kind === 'error') return fail(res, parsed.code, parsed.message);
    inFlight++;
    try {
      await complete(parsed.request, res);
    } finally {
      inFlight--;
    }
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      if (!res.headersSent) fail(res, 'LLMGW_UPSTREAM_FAILED', err.message, 500);
      else res.destroy();
    });
  });
  server.on('connection', (s) => s.setNoDelay(true));
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => resolve());
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : o.port;
  log('listening', { port, distPort: group.distPort, world: o.world });
  return {
    port,
    distPort: group.distPort,
    ready,
    inFlight: () => inFlight,
    exited,
    async close(): Promise<void> {
      draining = true;
      const deadline = Date.now() + 10_000;
      while (inFlight > 0 && Date.now() < deadline) await sleep(50);
      group.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}
