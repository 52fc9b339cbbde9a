/** Forwards one inference request to a replica and streams the answer back, retrying elsewhere before the first byte. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { GatewayTimeouts } from '../../config/types';
import { ERRORS, openAiError, type ErrorCode } from '../../lib/errors';
import { DOOR_MISS_HEADER } from '../../lib/node-door';
import { DOOR_CERT_REFUSED, DOOR_CONNECT_TIMEOUT, type DoorAgent } from '../../lib/door-agent';
import type { AccessNote, GatewayLog } from './log';
import type { ModelStats } from './model-stats';
import type { CallTimes, GatewayMetrics } from './metrics';
import type { PickResult, RoutableReplica, RoutingTable } from './routing';
import { SseTail } from './sse';
import { answerHead, type AnswerHead } from './upstream';
import type { UsageMeter } from './usage-meter';

/** What a proxied request needs besides the request itself. */
export interface ProxyDeps {
  routing: RoutingTable;
  /** The one client to every replica (upstream.ts): keep-alive connections, to engines and to nodes' doors. */
  dispatcher: Dispatcher;
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

/** Largest error answer read to tell a malformed request from a failing engine, bytes. */
const MAX_ERROR_ANSWER = 64 * 1024;

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
 * How many times a request that met a connection closed before any answer (undici's UND_ERR_SOCKET, or a reset) is
 * sent to the same replica again before it counts as the replica's failure. A connection the replica closed while
 * idle is taken out of the pool when its close arrives, so what is left is the race with a close in flight (a node's
 * door replaced new-first closes every connection the old door held); a replica that really died refuses the next
 * connection, and is ejected for that.
 */
const STALE_RETRIES = 2;
const STALE_ERRORS = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE']);

const CONNECT_ERRORS = new Set([
  'UND_ERR_CONNECT_TIMEOUT',
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  DOOR_CERT_REFUSED,
  DOOR_CONNECT_TIMEOUT,
]);

// first-byte: sent, nothing back yet; answer: a stream's headers are back, its first event is not (or an error
// answer is being read); idle: data flows.
type Phase = 'first-byte' | 'answer' | 'idle';

/** An error answer (5xx, or a door's miss) read whole before deciding what it is. */
interface ErrorAnswer {
  status: number;
  head: AnswerHead;
  chunks: Buffer[];
  size: number;
}

/** The origin (scheme, host, port) of a replica's engine or node door, as undici names a pool. */
function originOf(replica: RoutableReplica): string {
  const host = replica.host.includes(':') ? `[${replica.host}]` : replica.host;
  return `${replica.door ? 'https' : 'http'}://${host}:${replica.port}`;
}

/**
 * Sends `call` to `call.first`, then to other ready replicas while nothing has reached the client: on a connection
 * error, a connect or first-byte timeout, or a 5xx answer when another replica is left. Once bytes flow, a failure
 * (the replica closing, or no data for idleMs) ends a stream with an error event at an event boundary, and cuts any
 * other answer: a truncated answer must never look complete. Releases in-flight counts on every path.
 */
export function proxyRequest(deps: ProxyDeps, call: ProxyCall): void {
  const { routing, dispatcher, log, timeouts, metrics } = deps;
  const { res, note, model, reqId, times } = call;
  // Replicas tried and why they failed: made on the first failure (most requests have none).
  let tried: Set<string> | null = null;
  let failures: string[] | null = null;
  /** Stops the current attempt (a client that left); set per attempt. */
  let cancel: ((err: Error) => void) | null = null;
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
    cancel?.(new Error('the client closed the connection'));
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
    const { door } = replica;
    if (door && !deps.doorAgent) {
      release();
      return next(
        replica,
        `${replica.id} is behind node ${door.node}'s door, and this gateway has no gateway certificate to present there (server.yaml tls.gatewayCert: llmgw ca issue --gateway NAME)`,
        'LLMGW_UPSTREAM_FAILED',
      );
    }
    let phase: Phase = 'first-byte';
    let timedOut: string | null = null;
    let abort: ((err: Error) => void) | null = null;
    // An abort asked for before undici handed over its abort function (a timeout or a client gone that early).
    let abortFirst: Error | null = null;
    const stop = (err: Error): void => {
      if (abort) abort(err);
      else abortFirst ??= err;
    };
    cancel = stop;
    // The proxy's own timer (undici's are off): the first byte within firstByteMs — for a stream, its first event —
    // then no gap longer than idleMs.
    const onTimeout = (): void => {
      timedOut =
        phase === 'idle'
          ? `${replica.id}: the answer stalled, no data for ${timeouts.idleMs} ms`
          : `${replica.id}: no answer within ${call.firstByteMs} ms`;
      stop(new Error(timedOut));
    };
    let timer = setTimeout(onTimeout, call.firstByteMs);
    const idle = (): void => {
      phase = 'idle';
      clearTimeout(timer);
      timer = setTimeout(onTimeout, timeouts.idleMs);
    };
    let errorAnswer: ErrorAnswer | null = null;
    let stream: SseTail | undefined;
    let resume: (() => void) | null = null;
    const resumeUpstream = (): void => resume?.();
    const { meter } = call;
    const stats = deps.stats !== undefined;
    const accept = call.req.headers.accept;
    const headers: Record<string, string> = { 'content-type': 'application/json', 'x-request-id': reqId };
    if (accept) headers.accept = accept;

    /** A 5xx (or a door's miss) read whole: the client's error, another replica, or the answer as it is. */
    const answerError = (e: ErrorAnswer, answer: Buffer | null): void => {
      if (clientGone) return;
      const refused = answer && engineRefusal(answer);
      if (refused) {
        log('the engine refused the request as malformed', {
          level: 'warn',
          reqId,
          model,
          replica: replica.id,
          status: e.status,
          error: refused,
        });
        return fail('LLMGW_BAD_REQUEST', `the engine refused the request: ${refused}`);
      }
      metrics?.upstreamError(model, replica.id, 'status-5xx');
      const other = routing.pick(model, new Set([...(tried ?? []), replica.id]));
      if (other.kind === 'ok' || !answer)
        return next(
          replica,
          `${replica.id} answered ${e.status}`,
          'LLMGW_UPSTREAM_FAILED',
          other.kind === 'ok' ? other : undefined,
        );
      res.writeHead(e.status, { ...e.head.pass, 'content-length': answer.length });
      if (note) note.bytes = answer.length;
      res.end(answer);
    };

    const handler: Dispatcher.DispatchHandler = {
      onConnect(a: (err?: Error) => void): void {
        abort = a;
        if (abortFirst) a(abortFirst);
      },
      onHeaders(status: number, raw: Buffer[], resumeFn: () => void): boolean {
        if (times) times.headAt = performance.now();
        phase = 'answer';
        routing.healthy(replica.id);
        const head = answerHead(raw, DOOR_MISS_HEADER);
        const sse = head.contentType.startsWith('text/event-stream');
        // The door's own 404 means the replica is not on that node (a stale route): another replica is tried, as
        // for a 5xx. Read the (small) error answer first: an engine that refused the request as malformed says so
        // in a 500 (llama.cpp does), and that is the client's error — answered 400, never tried elsewhere.
        if ((status >= 500 || head.doorMiss) && !clientGone && !sse) {
          errorAnswer = { status, head, chunks: [], size: 0 };
          return true;
        }
        res.writeHead(status, head.pass);
        if (sse) {
          // Streams start with headers only; pass them on so the client sees 200 before the first token. The
          // prefill comes after the headers, so the first-byte timeout runs on until the first event.
          stream = new SseTail();
          res.flushHeaders();
          if (times) times.stream = true;
        } else idle();
        resume = resumeFn;
        if (times) times.headDoneAt = performance.now();
        return true;
      },
      onData(chunk: Buffer): boolean {
        const e = errorAnswer;
        if (e) {
          e.size += chunk.length;
          if (e.size <= MAX_ERROR_ANSWER) e.chunks.push(chunk);
          return true;
        }
        if (phase !== 'idle') idle();
        else timer.refresh();
        if (stats) ttftMs ??= performance.now() - t0; // model stats: TTFT
        stream?.push(chunk);
        meter?.push(chunk, stream !== undefined);
        if (note) note.bytes += chunk.length;
        if (times) {
          if (stream && times.firstChunkAt === 0) times.firstChunkAt = performance.now();
          times.prev = times.tail;
          times.tail = chunk;
        }
        // Backpressure: a client that reads slower than the replica answers pauses the upstream until it drains.
        if (res.write(chunk) || res.destroyed) return true;
        res.once('drain', resumeUpstream);
        return false;
      },
      onComplete(): void {
        clearTimeout(timer);
        release();
        const e = errorAnswer;
        if (e) return answerError(e, e.size <= MAX_ERROR_ANSWER ? Buffer.concat(e.chunks, e.size) : null);
        res.end();
      },
      onError(err: Error & { code?: string }): void {
        clearTimeout(timer);
        release();
        if (clientGone) return;
        const e = errorAnswer;
        if (e) return answerError(e, null);
        const code = err.code ?? '';
        if (code === 'UND_ERR_CONNECT_TIMEOUT')
          timedOut = `${replica.id}: no connection within ${timeouts.connectMs} ms`;
        if (phase !== 'first-byte') {
          // After the first byte: a stream ends with an error event, any other answer is cut.
          metrics?.upstreamError(model, replica.id, 'cut');
          const why = timedOut ?? `${replica.id} closed the connection mid-answer`;
          const failed: ErrorCode = timedOut ? 'LLMGW_UPSTREAM_TIMEOUT' : 'LLMGW_UPSTREAM_FAILED';
          log('answer cut: the replica failed after its first byte', {
            level: 'error',
            reqId,
            model,
            replica: replica.id,
            code: failed,
            error: why,
          });
          return fail(failed, `model ${model}: ${why}; the answer is incomplete`, stream);
        }
        // A connection closed under the request before any answer: the same replica once more (see STALE_RETRIES).
        if (!timedOut && staleRetries > 0 && STALE_ERRORS.has(code)) return attempt(replica, staleRetries - 1);
        const refused = CONNECT_ERRORS.has(code);
        if (refused) routing.eject(replica, timedOut ?? err.message);
        metrics?.upstreamError(model, replica.id, timedOut ? 'timeout' : refused ? 'connect' : 'reset');
        next(
          replica,
          timedOut ?? `${replica.id}: ${err.message}`,
          timedOut ? 'LLMGW_UPSTREAM_TIMEOUT' : 'LLMGW_UPSTREAM_FAILED',
        );
      },
    };
    dispatcher.dispatch(
      {
        origin: originOf(replica),
        path: door ? door.base + call.path : call.path,
        method: 'POST',
        headers,
        body: call.body,
        // A node door is asked for by its node's name, the name its certificate must carry (door-agent.ts).
        ...(door ? { servername: door.node } : {}),
      },
      handler,
    );
    if (times && times.sentAt === 0) times.sentAt = performance.now();
  };

  attempt(call.first, STALE_RETRIES);
}
