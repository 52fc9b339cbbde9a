/** The sim engine: a real HTTP server speaking the engines' OpenAI-compatible API, with fake tokens. */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { openAiError, quoteInput, type ErrorCode, ERRORS } from '../errors';
import { lockGpus, type GpuLocks } from './gpu-locks';
import { formGroup } from './group';
import { PrefillQueue, PrefixCache } from './prefix-cache';
import {
  chunkBody,
  completionBody,
  fakeToken,
  parseSimRequest,
  promptSeed,
  usageChunk,
  usageOf,
  type SimEndpoint,
  type SimRequest,
} from './openai';

/** How to start one rank of a sim engine. */
export interface SimOptions {
  model: string;
  host: string;
  /** 0 = any free port (tests) */
  port: number;
  rank: number;
  world: number;
  distHost: string;
  /** 0 = any free port (tests) */
  distPort: number;
  /** 0 = as fast as possible */
  tokensPerSecond: number;
  /** Requests it says it serves at once, on GET /props as llama.cpp's total_slots (default 64; not enforced) */
  slots?: number;
  /** Its prefix cache's budget in tokens (default DEFAULT_PREFIX_CACHE_TOKENS; 0: none) */
  prefixCacheTokens?: number;
  /** Uncached prompt tokens it computes per second, one prompt at a time (default 0: prefill takes no time) */
  prefillTokensPerSecond?: number;
  /** The GPU indices it was given (its CUDA_VISIBLE_DEVICES; null: unset), reported on /health */
  devices?: number[] | null;
  /** Where this node keeps one lock file per GPU index: a GPU another live sim engine holds is refused */
  gpuLockDir?: string;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

/** A running rank. */
export interface SimEngine {
  /** Bound HTTP port (rank 0), 0 for worker ranks */
  port: number;
  /** Bound dist-init port (rank 0 of a multi-rank group), else 0 */
  distPort: number;
  ready(): boolean;
  inFlight(): number;
  /** Stops taking requests, lets in-flight ones finish (at most 10 s), closes; `exited` then resolves with code 0. */
  close(): Promise<void>;
  /** Resolves when the rank is done: code 3 when the group broke (a rank left), 0 after close(). */
  exited: Promise<{ code: number; reason: string }>;
}

const DRAIN_MS = 10_000;
/** The prefix cache's default budget: a few long system prompts, as a small GPU's KV cache holds. */
export const DEFAULT_PREFIX_CACHE_TOKENS = 16_384;
const MAX_BODY = 16 * 1024 * 1024;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const json = (res: ServerResponse, status: number, body: unknown): void =>
  void res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));

/** Starts one rank: rank 0 serves HTTP once every worker joined; workers only hold their group connection. */
export async function startSimEngine(o: SimOptions): Promise<SimEngine> {
  const log = o.log ?? ((): void => undefined);
  const devices = o.devices ?? null;
  // Before anything binds: a GPU held by another engine is a failed start, as on real hardware.
  const locks: GpuLocks | null =
    o.gpuLockDir && devices?.length
      ? lockGpus(o.gpuLockDir, devices, `sim-engine ${o.model} rank ${o.rank} (port ${o.port})`)
      : null;
  const group = await formGroup({ rank: o.rank, world: o.world, distHost: o.distHost, distPort: o.distPort }).catch(
    (err: unknown) => {
      locks?.release();
      throw err;
    },
  );
  void group.broken.then(() => locks?.release());
  let broken: string | null = null;
  let closed: (v: { code: number; reason: string }) => void = () => undefined;
  const exited = Promise.race([
    group.broken.then((reason) => {
      broken = reason;
      log('group broken', { rank: o.rank, reason });
      return { code: 3, reason };
    }),
    new Promise<{ code: number; reason: string }>((r) => (closed = r)),
  ]);
  if (o.rank > 0) {
    log('joined', { rank: o.rank, world: o.world, distHost: o.distHost, distPort: o.distPort });
    const close = async (): Promise<void> => {
      group.close();
      locks?.release();
      closed({ code: 0, reason: 'closed' });
    };
    return { port: 0, distPort: 0, ready: () => !broken, inFlight: () => 0, close, exited };
  }

  let inFlight = 0;
  let draining = false;
  const cache = new PrefixCache(o.prefixCacheTokens ?? DEFAULT_PREFIX_CACHE_TOKENS);
  const prefill = new PrefillQueue(o.prefillTokensPerSecond ?? 0);
  const ready = (): boolean => group.ready() && !broken && !draining;
  const delay = o.tokensPerSecond > 0 ? 1000 / o.tokensPerSecond : 0;
  const fail = (res: ServerResponse, code: ErrorCode, message: string, status?: number): void =>
    json(res, status ?? ERRORS[code].status, openAiError(code, message));
  const notReady = (): string =>
    broken
      ? `engine stopped: ${broken}`
      : draining
        ? 'engine is shutting down'
        : `waiting for ranks: ${group.joined()} of ${o.world - 1} workers joined`;

  const complete = async (req: SimRequest, res: ServerResponse): Promise<void> => {
    const id = `${req.endpoint === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID()}`;
    const created = Math.floor(Date.now() / 1000);
    const seed = promptSeed(req.promptText);
    // The prompt's cached blocks are reused; the rest waits its turn at the prefill, then is computed.
    const looked = cache.lookup(req.promptText);
    const prefilled = prefill.schedule(looked.promptTokens - looked.cachedTokens, Date.now());
    const cached = looked.cachedTokens;
    if (prefilled > Date.now()) await sleep(prefilled - Date.now());
    const t0 = Date.now();
    // Pace against the start time, not token to token, so timer slack does not add up.
    const pace = async (i: number): Promise<void> => {
      if (delay) await sleep(t0 + (i + 1) * delay - Date.now());
    };
    if (!req.stream) {
      let text = '';
      for (let i = 0; i < req.maxTokens; i++) {
        await pace(i);
        text += fakeToken(seed, i);
      }
      if (broken) return fail(res, 'LLMGW_ENGINE_EXITED', `engine stopped: ${broken}`, 503);
      return json(res, 200, completionBody(req, id, created, text, usageOf(req, req.maxTokens, cached)));
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    res.flushHeaders();
    let gone = false;
    res.once('close', () => void (gone = true));
    // Each chunk goes out as soon as it exists; a slow reader gets backpressure, not a growing buffer.
    const send = async (obj: unknown): Promise<void> => {
      if (res.write(`data: ${JSON.stringify(obj)}\n\n`) || gone) return;
      await new Promise<void>((r) => {
        const done = (): void => void (res.off('drain', done), res.off('close', done), r());
        res.on('drain', done).on('close', done);
      });
    };
    if (req.endpoint === 'chat') await send(chunkBody(req, id, created, { text: '', role: true }));
    let n = 0;
    for (; n < req.maxTokens && !gone && !broken; n++) {
      await pace(n);
      await send(chunkBody(req, id, created, { text: fakeToken(seed, n) }));
    }
    if (gone) return;
    // A broken group must look like a dead engine to the client: cut the stream, no [DONE].
    if (broken) return void res.destroy();
    await send(chunkBody(req, id, created, { text: '', finish: true }));
    if (req.includeUsage) await send(usageChunk(req, id, created, usageOf(req, n, cached)));
    res.end('data: [DONE]\n\n');
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && url === '/health') {
      if (ready()) return json(res, 200, { status: 'ok', devices });
      const status = broken ? 'stopped' : draining ? 'draining' : 'waiting';
      return json(res, 503, { status, joined: group.joined(), world: o.world, reason: notReady(), devices });
    }
    // As llama-server's /props: the gateway's admission takes a replica's limit from it (gateway/inference/slots.ts).
    if (req.method === 'GET' && url === '/props') return json(res, 200, { total_slots: o.slots ?? 64 });
    // vLLM's names, so whatever reads an engine's queue and cache reads the sim's the same way.
    if (req.method === 'GET' && url === '/metrics') {
      const now = Date.now();
      const waiting = prefill.waiting(now);
      return void res
        .writeHead(200, { 'content-type': 'text/plain; version=0.0.4' })
        .end(vllmMetrics(o.model, { running: inFlight - waiting, waiting, usage: cache.usage(), cache }));
    }
    if (req.method === 'GET' && url === '/v1/models') {
      return json(res, 200, { object: 'list', data: [{ id: o.model, object: 'model', created: 0, owned_by: 'sim' }] });
    }
    const endpoint: SimEndpoint | null =
      url === '/v1/chat/completions' ? 'chat' : url === '/v1/completions' ? 'text' : null;
    if (req.method === 'POST' && url === '/v1/embeddings')
      return fail(
        res,
        'LLMGW_ENDPOINT_UNSUPPORTED',
        'the sim engine serves no embeddings (like llama-server without --embeddings)',
      );
    if (req.method !== 'POST' || !endpoint)
      return fail(res, 'LLMGW_NOT_FOUND', `no route ${req.method} ${quoteInput(url, 100)}`);
    inFlight++;
    try {
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const c of req) {
        size += (c as Buffer).length;
        if (size > MAX_BODY) return fail(res, 'LLMGW_BAD_REQUEST', `request body over ${MAX_BODY} bytes`, 413);
        chunks.push(c as Buffer);
      }
      if (!ready()) return fail(res, 'LLMGW_NO_READY_REPLICA', notReady(), 503);
      const parsed = parseSimRequest(endpoint, Buffer.concat(chunks).toString('utf8'), o.model);
      if (parsed.kind === 'error') return fail(res, parsed.code, parsed.message);
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
  }).catch((err: Error) => {
    group.close();
    locks?.release();
    throw err;
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : o.port;
  log('serving', { port, distPort: group.distPort, world: o.world, model: o.model, devices });
  if (o.world > 1) watchJoins(group, o.world, log);
  return {
    port,
    distPort: group.distPort,
    ready,
    inFlight: () => inFlight,
    exited,
    async close(): Promise<void> {
      if (draining) return;
      draining = true;
      const stopped = new Promise((r) => server.close(r)); // no new connections; idle keep-alives close now
      const deadline = Date.now() + DRAIN_MS;
      while (inFlight > 0 && Date.now() < deadline) await sleep(50);
      if (inFlight > 0) log('drain timed out', { inFlight });
      server.closeAllConnections();
      group.close();
      locks?.release();
      await stopped;
      closed({ code: 0, reason: 'closed' });
    },
  };
}

/** The sim's queue and cache as vLLM's /metrics says them (Prometheus text). */
function vllmMetrics(
  model: string,
  m: { running: number; waiting: number; usage: number; cache: { queries: number; hits: number } },
): string {
  const l = `{model_name=${JSON.stringify(model)}}`;
  const family = (name: string, type: string, help: string, value: number): string =>
    `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}${l} ${value}\n`;
  return (
    family(
      'vllm:num_requests_running',
      'gauge',
      'Requests past their prefill wait (prefilling or decoding).',
      m.running,
    ) +
    family('vllm:num_requests_waiting', 'gauge', 'Requests waiting for the prefill.', m.waiting) +
    family('vllm:gpu_cache_usage_perc', 'gauge', 'Share of the prefix cache budget in use, 0..1.', m.usage) +
    family(
      'vllm:prefix_cache_queries_total',
      'counter',
      'Prompt tokens looked up in the prefix cache.',
      m.cache.queries,
    ) +
    family('vllm:prefix_cache_hits_total', 'counter', 'Prompt tokens served from the prefix cache.', m.cache.hits)
  );
}

/** Logs each change in the number of joined workers until the group is complete (or broken). */
function watchJoins(
  group: { joined(): number; ready(): boolean; broken: Promise<string> },
  world: number,
  log: (m: string, f?: Record<string, unknown>) => void,
): void {
  let seen = 0;
  const t = setInterval(() => {
    const n = group.joined();
    if (n !== seen) log(n > seen ? 'rank joined' : 'rank left', { joined: n, world });
    seen = n;
    if (group.ready()) {
      log('group ready', { world });
      clearInterval(t);
    }
  }, 100);
  t.unref();
  void group.broken.then(() => clearInterval(t));
}
