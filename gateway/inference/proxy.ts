/** Forwards one inference request to a replica and streams the answer back, retrying elsewhere before the first byte. */
import {
  request,
  type Agent,
  type ClientRequest,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from 'node:http';
import type { GatewayTimeouts } from '../../config/types';
import { request as httpsRequest } from 'node:https';
import { ERRORS, openAiError, type ErrorCode } from '../../lib/errors';
import { DOOR_MISS_HEADER } from '../../lib/node-door';
import { DOOR_CERT_REFUSED, DOOR_CONNECT_TIMEOUT, type DoorAgent } from '../../lib/door-agent';
import type { AccessNote, GatewayLog } from './log';
import type { ModelStats } from './model-stats';
import type { CallTimes, GatewayMetrics } from './metrics';
import type { PickResult, RoutableReplica, RoutingTable } from './routing';
import { SseTail } from './sse';
import type { UsageMeter } from './usage-meter';

/** What a proxied request needs besides the request itself. */
export interface ProxyDeps {
  routing: RoutingTable;
  /** A keep-alive agent shared by all requests, so the gateway reuses upstream connections. */
  agent: Agent;
  /** The keep-alive TLS pool to the nodes' doors, with the gateway certificate (absent: no tls.gatewayCert) */
  doorAgent?: DoorAgent;
  log: GatewayLog;
  timeouts: GatewayTimeouts;
  /** Per-model request counts and TTFT for the cluster page (model-stats.ts); none = nothing counted. */
  stats?: ModelStats;
  /** The gateway's metrics, when its metrics listener is on */
  metrics?: GatewayMetrics;
}

/** One request to proxy: the replica picked first, and the raw body bytes as the client sent them. */
export interface ProxyCall {
  model: string;
  path: string;
  body: Buffer;
  first: RoutableReplica;
  /** The model's first-byte timeout, ms: the catalog's, else gateway.timeouts.firstByteMs. */
  firstByteMs: number;
  reqId: string;
  req: IncomingMessage;
  res: ServerResponse;
  /** The access log's record of this request, when the access log is on. */
  note?: AccessNote;
  /** Reads the tokens the answer reports (requests with a stored key). */
  meter?: UsageMeter;
  /** Its metrics: key label and times (with deps.metrics) */
  key?: string;
  times?: CallTimes;
}

// Response headers worth passing through; hop-by-hop ones (connection, transfer-encoding) are Node's business, and
// x-request-id is the gateway's own (set for every response before the route runs).
const PASS_HEADERS = ['content-type', 'content-length', 'cache-control'] as const;

/** The response headers passed on to the client. */
function passHeaders(upRes: IncomingMessage): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const h of PASS_HEADERS) {
    const v = upRes.headers[h];
    if (v !== undefined) out[h] = v;
  }
  return out;
}

/** Largest error answer read to tell a malformed request from a failing engine, bytes. */
const MAX_ERROR_ANSWER = 64 * 1024;

/** Reads an engine's error answer whole, or null when it is larger than an error message (or the connection failed). */
function readErrorAnswer(upRes: IncomingMessage): Promise<Buffer | null> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    upRes.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= MAX_ERROR_ANSWER) chunks.push(c);
    });
    upRes.once('end', () => resolve(size <= MAX_ERROR_ANSWER ? Buffer.concat(chunks) : null));
    upRes.once('close', () => resolve(null));
  });
}

/**
 * The engine's message when its 500 says the request was malformed (llama.cpp answers a `tools` or `messages` it
 * cannot read with 500 "Failed to parse tools: …", and a JSON type error with its `[json.exception…]` text), else
 * null: a 500 that is the engine's own failure.
 */
export function engineRefusal(answer: Buffer): string | null {
  try {
    const message = (JSON.parse(answer.toString('utf8')) as { error?: { message?: unknown } }).error?.message;
    return typeof message === 'string' && /^Failed to parse |\[json\.exception\./.test(message) ? message : null;
  } catch {
    return null;
  }
}

// The replica is not there: only these eject it. An HTTP error, a reset or a client that left never do.
// A node door whose certificate is not its node's, or that does not open within connectMs (door-agent.ts), is
// as unreachable as a refused port.
/**
 * How many pooled connections a request may find closed by the replica while idle before it counts as the
 * replica's failure. More than one: a node's door replaced new-first closes every connection the old door held, and
 * a gateway pools several to it (a retry once went to the next stale connection: a 502 with one replica).
 */
const STALE_RETRIES = 16;

const CONNECT_ERRORS = new Set([
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  DOOR_CERT_REFUSED,
  DOOR_CONNECT_TIMEOUT,
]);

// first-byte: sent, nothing back yet; answer: a stream's headers are back, its first event is not; idle: data flows.
type Phase = 'connect' | 'first-byte' | 'answer' | 'idle';

/**
 * Sends `call` to `call.first`, then to other ready replicas while nothing has reached the client: on a connection
 * error, a connect or first-byte timeout, or a 5xx answer when another replica is left. Once bytes flow, a failure
 * (the replica closing, or no data for idleMs) ends a stream with an error event at an event boundary, and cuts any
 * other answer: a truncated answer must never look complete. Releases in-flight counts on every path.
 */
export function proxyRequest(deps: ProxyDeps, call: ProxyCall): void {
  const { routing, agent, log, timeouts, metrics } = deps;
  const { res, note, model, reqId, times } = call;
  // Replicas tried and why they failed: made on the first failure (most requests have none).
  let tried: Set<string> | null = null;
  let failures: string[] | null = null;
  let current: ClientRequest | null = null;
  let clientGone = false;
  // Model stats (issue 23): one record per request when its response closes; TTFT is set at the first body byte.
  const t0 = deps.stats ? performance.now() : 0;
  let ttftMs: number | null = null;

  // One listener for the response's end (each listener costs per request): metrics and model stats are recorded,
  // and a client that disconnects before the response is complete takes the upstream request with it.
  res.on('close', () => {
    const finished = res.writableFinished;
    if (times) metrics?.done(model, call.key ?? '', finished ? res.statusCode : 499, times, call.meter);
    deps.stats?.record(model, res.headersSent ? res.statusCode : 499, ttftMs);
    if (finished) return;
    clientGone = true;
    current?.destroy();
  });

  /** Ends the request with the gateway's own error: an answer before any byte was sent, an SSE event after. */
  const fail = (code: ErrorCode, message: string, stream?: SseTail): void => {
    if (note) note.error = code;
    const error = JSON.stringify(openAiError(code, message));
    if (!res.headersSent) {
      if (note) note.bytes = Buffer.byteLength(error);
      return void res
        .writeHead(ERRORS[code].status, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(error),
        })
        .end(error);
    }
    // As vLLM ends a stream that fails: the error in OpenAI's shape as one more event, then [DONE]. Only between two
    // events: cut inside one, the client would read a broken event first, so the connection is cut instead.
    if (!stream?.atBoundary()) return void res.destroy();
    const tail = `data: ${error}\n\ndata: [DONE]\n\n`;
    if (note) note.bytes += Buffer.byteLength(tail);
    res.end(tail);
  };

  const next = (failed: RoutableReplica, why: string, code: ErrorCode, picked?: PickResult): void => {
    tried ??= new Set();
    failures ??= [];
    tried.add(failed.id);
    failures.push(why);
    if (clientGone) return;
    const p = picked ?? routing.pick(model, tried);
    if (p.kind !== 'ok') {
      log('request failed: no replica answered', { level: 'error', reqId, model, code, failures });
      return fail(code, `model ${model}: every replica failed before answering (${failures.join('; ')})`);
    }
    log('retrying on another replica', {
      level: 'warn',
      reqId,
      model,
      failed: failed.id,
      next: p.replica.id,
      error: why,
    });
    attempt(p.replica, STALE_RETRIES);
  };

  const attempt = (replica: RoutableReplica, staleRetries: number): void => {
    routing.acquire(replica.id);
    if (note) note.replica = replica.id;
    let released = false;
    const release = (): void => {
      if (!released) routing.release(replica.id);
      released = true;
    };
    let phase: Phase = 'first-byte';
    let timedOut: string | null = null;
    const headers: OutgoingHttpHeaders = {
      'content-type': 'application/json',
      'content-length': call.body.length,
      'x-request-id': reqId,
    };
    if (call.req.headers.accept) headers.accept = call.req.headers.accept;
    const { door } = replica;
    if (door && !deps.doorAgent) {
      release();
      return next(
        replica,
        `${replica.id} is behind node ${door.node}'s door, and this gateway has no gateway certificate to present there (server.yaml tls.gatewayCert: llmgw ca issue --gateway NAME)`,
        'LLMGW_UPSTREAM_FAILED',
      );
    }
    // Behind a node's door: keep-alive TLS with the gateway certificate, to the node the route names (servername).
    const upReq = door
      ? httpsRequest({
          agent: deps.doorAgent,
          host: replica.host,
          port: replica.port,
          servername: door.node,
          path: door.base + call.path,
          method: 'POST',
          headers,
        })
      : request({ agent, host: replica.host, port: replica.port, path: call.path, method: 'POST', headers });
    current = upReq;

    upReq.on('socket', (s) => {
      s.setNoDelay(true);
      // A new connection has connectMs to open; Node puts the first-byte timeout below in place on 'connect'.
      if (s.connecting) s.setTimeout(timeouts.connectMs);
    });
    // The socket's own idle timer, reset by every byte and re-armed per phase: no timer of ours per request.
    upReq.setTimeout(call.firstByteMs, () => {
      if (upReq.socket?.connecting) phase = 'connect';
      timedOut =
        phase === 'connect'
          ? `${replica.id}: no connection within ${timeouts.connectMs} ms`
          : phase === 'idle'
            ? `${replica.id}: the answer stalled, no data for ${timeouts.idleMs} ms`
            : `${replica.id}: no answer within ${call.firstByteMs} ms`;
      upReq.destroy(new Error(timedOut));
    });

    upReq.on('error', (err: NodeJS.ErrnoException) => {
      release();
      // Once an answer has begun, its 'close' below ends the request.
      if (clientGone || phase === 'answer' || phase === 'idle') return;
      // A pooled connection the replica closed while idle: not the replica's fault, try it again. Each such failure
      // takes its connection out of the pool, so the tries go through the stale ones to a fresh connection.
      if (staleRetries > 0 && upReq.reusedSocket && err.code === 'ECONNRESET')
        return attempt(replica, staleRetries - 1);
      const refused = phase === 'connect' || CONNECT_ERRORS.has(err.code ?? '');
      if (refused) routing.eject(replica, err.message);
      metrics?.upstreamError(model, replica.id, timedOut ? 'timeout' : refused ? 'connect' : 'reset');
      next(
        replica,
        timedOut ?? `${replica.id}: ${err.message}`,
        timedOut ? 'LLMGW_UPSTREAM_TIMEOUT' : 'LLMGW_UPSTREAM_FAILED',
      );
    });

    upReq.on('response', (upRes) => {
      if (times) times.headAt = performance.now();
      phase = 'answer';
      routing.healthy(replica.id);
      const status = upRes.statusCode ?? 502;
      // The door's own 404: the replica is not on that node (a stale route); another replica is tried, as for a 5xx.
      const doorMiss = door !== undefined && upRes.headers[DOOR_MISS_HEADER] !== undefined;
      if (
        (status >= 500 || doorMiss) &&
        !clientGone &&
        !String(upRes.headers['content-type']).startsWith('text/event-stream')
      ) {
        upRes.once('close', release);
        // Read the (small) error answer first: an engine that refused the request as malformed says so in a 500
        // (llama.cpp does), and that is the client's error — answered 400, never tried on another replica.
        return void readErrorAnswer(upRes).then((answer) => {
          if (clientGone) return;
          const refused = answer && engineRefusal(answer);
          if (refused) {
            log('the engine refused the request as malformed', {
              level: 'warn',
              reqId,
              model,
              replica: replica.id,
              status,
              error: refused,
            });
            return fail('LLMGW_BAD_REQUEST', `the engine refused the request: ${refused}`);
          }
          metrics?.upstreamError(model, replica.id, 'status-5xx');
          const other = routing.pick(model, new Set([...(tried ?? []), replica.id]));
          if (other.kind === 'ok' || !answer)
            return next(
              replica,
              `${replica.id} answered ${status}`,
              'LLMGW_UPSTREAM_FAILED',
              other.kind === 'ok' ? other : undefined,
            );
          res.writeHead(status, { ...passHeaders(upRes), 'content-length': answer.length });
          if (note) note.bytes = answer.length;
          res.end(answer);
        });
      }
      res.writeHead(status, passHeaders(upRes));
      const stream = String(upRes.headers['content-type']).startsWith('text/event-stream') ? new SseTail() : undefined;
      const { meter } = call;
      const stats = deps.stats !== undefined;
      if (stream) {
        // Streams start with headers only; pass them on so the client sees 200 before the first token. The prefill
        // comes after the headers, so the first-byte timeout runs on until the first event.
        res.flushHeaders();
        if (times) times.stream = true;
      } else {
        phase = 'idle';
        upReq.setTimeout(timeouts.idleMs);
      }
      // One 'data' listener passes the answer on and reads it as it passes, instead of pipe() and a listener of
      // our own: pipe() adds and removes eight listeners per request and emits every chunk to two listeners
      // (measured: docs/architecture.md, "Beside other proxies"). Backpressure as pipe() does it: a client that
      // reads slower than the replica answers pauses the upstream until its socket drains.
      const resume = (): void => void upRes.resume();
      upRes.on('data', (chunk: Buffer) => {
        if (phase !== 'idle') {
          phase = 'idle';
          upReq.setTimeout(timeouts.idleMs);
        }
        if (stats) ttftMs ??= performance.now() - t0; // model stats: TTFT
        stream?.push(chunk);
        meter?.push(chunk, stream !== undefined);
        if (note) note.bytes += chunk.length;
        if (times) {
          if (stream && times.firstChunkAt === 0) times.firstChunkAt = performance.now();
          times.prev = times.tail;
          times.tail = chunk;
        }
        if (!res.write(chunk) && !res.destroyed) {
          upRes.pause();
          res.once('drain', resume);
        }
      });
      upRes.on('end', () => void res.end());
      upRes.on('error', () => undefined); // 'close' below handles it
      upRes.on('close', () => {
        release();
        if (upRes.complete || clientGone) return;
        metrics?.upstreamError(model, replica.id, 'cut');
        const why = timedOut ?? `${replica.id} closed the connection mid-answer`;
        const code: ErrorCode = timedOut ? 'LLMGW_UPSTREAM_TIMEOUT' : 'LLMGW_UPSTREAM_FAILED';
        log('answer cut: the replica failed after its first byte', {
          level: 'error',
          reqId,
          model,
          replica: replica.id,
          code,
          error: why,
        });
        fail(code, `model ${model}: ${why}; the answer is incomplete`, stream);
      });
      if (times) times.headDoneAt = performance.now();
    });

    upReq.end(call.body);
    if (times && times.sentAt === 0) times.sentAt = performance.now();
  };

  attempt(call.first, STALE_RETRIES);
}
