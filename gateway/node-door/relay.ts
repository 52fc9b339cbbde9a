/**
 * The node door's relay: HTTP/1.1 between a gateway's keep-alive TLS connection and an engine's keep-alive
 * loopback connection, moved as bytes. Each request's head is read (http1.ts) to route it and to rewrite its path
 * and Host; its body and the engine's answer pass through as they came — chunk by chunk, never buffered or
 * decoded — while their frames count where each message ends, so both connections stay open for the next request.
 * Node's HTTP server and client in its place (IncomingMessage, ServerResponse, http.request, pipe) cost 0.2-0.26 ms
 * more a request and twice the CPU (docs/identity.md, "What it costs").
 *
 * One request at a time per connection (a pipelined next request waits, read but not parsed, until the answer
 * before it ended); a client that leaves takes its engine request with it (the engine stops generating); an engine
 * that fails mid-answer cuts the client's connection (a truncated answer must never look complete); an answer the
 * engine ends by closing is passed on chunked, so the gateway's connection stays open.
 */
import { STATUS_CODES } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { openAiError, type ErrorCode } from '../../lib/errors';
import {
  type BodyFrame,
  FrameError,
  MAX_ANSWER_HEAD,
  MAX_REQUEST_HEAD,
  answerFrame,
  connectionHas,
  headEnd,
  parseHead,
  requestFrame,
  type Head,
} from './http1';

/** How long a gateway's connection may sit idle between requests, ms (Node's server keepAliveTimeout as the door had it). */
const CLIENT_IDLE_MS = 65_000;
/** How long a request head may take to arrive once it started, ms (Node's headersTimeout). */
const HEAD_MS = 60_000;
/**
 * How long an idle engine connection is kept, ms (dropped by a sweep every second, so 3-4 s): below the engines' own
 * keep-alive (llama.cpp's and uvicorn's 5 s), so the door drops one before the engine does and seldom sends a
 * request into a closing connection (one that meets it is sent again on a fresh connection). A sweep, not a timer
 * per connection: arming and clearing a socket's timer at every request is work on every request.
 */
const UPSTREAM_IDLE_MS = 3000;
const SWEEP_MS = 1000;
/** Idle engine connections kept per engine. */
const MAX_IDLE_PER_ENGINE = 64;

/** What a connection's client certificate was judged (once per connection). */
export type Verdict = { ok: true; cn: string } | { ok: false; status: number; why: string; message: string };

/** The door's own answer to a request (an error, the signals). */
export interface LocalAnswer {
  kind: 'answer';
  status: number;
  body: string;
  headers?: Record<string, string>;
}

/** What the door does with a request, by its method and target. */
export type Decision = LocalAnswer | { kind: 'forward'; port: number; path: string; replica: string };

export interface RelayHooks {
  /** The connection's client certificate, judged on its first request. */
  judge(socket: TLSSocket): Verdict | Promise<Verdict>;
  /** The answer for a refused certificate (logged there). */
  refused(v: Extract<Verdict, { ok: false }>, target: string): LocalAnswer;
  /** Where a request goes, or the door's own answer. */
  decide(method: string, target: string): Decision;
  /** The answer when the engine could not be reached or failed before its answer began. */
  failed(to: { port: number; replica: string }, error: string): LocalAnswer;
  /** An internal fault (a judge that threw). */
  internal(err: Error): LocalAnswer;
}

/** A JSON error answer in OpenAI's shape. */
export function jsonAnswer(
  code: ErrorCode,
  status: number,
  message: string,
  headers?: Record<string, string>,
): LocalAnswer {
  return { kind: 'answer', status, body: JSON.stringify(openAiError(code, message)), ...(headers ? { headers } : {}) };
}

// Each connection's own: never passed on (RFC 9110 §7.6.1). Bodies pass as they came, so a chunked one keeps its
// Transfer-Encoding (a request's is written again as the one coding the door takes); Host is the engine's.
const REQUEST_DROP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'host',
]);
const ANSWER_DROP = new Set(['connection', 'keep-alive', 'proxy-connection', 'upgrade']);
const CHUNK_END = Buffer.from('0\r\n\r\n');
const CRLF = Buffer.from('\r\n');

/** One request on its way: its head, its body's frame, the engine connection it went to and the answer so far. */
class Exchange {
  /** The request body is still arriving from the client. */
  bodyOpen: boolean;
  /** The answer's head (the engine's or the door's own) went to the client. */
  answered = false;
  ended = false;
  up: Upstream | null = null;
  /** Where it went (a forward), for a retry on a fresh connection and the failure's message. */
  to: { port: number; replica: string } | null = null;
  /** The whole request as first written to the engine, kept while it may be sent again on a fresh connection. */
  replay: Buffer | null = null;
  /** The answer's bytes before its head was complete. */
  answerHead: Buffer | null = null;
  answer: BodyFrame | null = null;
  /** The engine connection may serve the next request. */
  reusable = true;

  constructor(
    readonly conn: Connection,
    readonly method: string,
    readonly target: string,
    public keepAlive: boolean,
    readonly body: BodyFrame,
  ) {
    this.bodyOpen = !body.done;
  }

  /** Judged and routed (sent on, or answered by the door): body bytes go to the engine or are dropped. */
  get started(): boolean {
    return this.to !== null || this.answered;
  }

  /** An answer that ends with the engine's close is passed on chunked. */
  get rechunk(): boolean {
    return this.answer?.kind === 'close';
  }
}

/** A loopback connection to an engine. */
class Upstream {
  ex: Exchange | null = null;
  fresh = true;
  /** When it was last given back to the pool (Date.now()). */
  idleSince = 0;
  private error: string | null = null;

  constructor(
    readonly pool: UpstreamPool,
    readonly port: number,
    readonly sock: Socket,
  ) {
    sock.setNoDelay(true);
    sock.on('data', (chunk: Buffer) => {
      if (this.ex) this.ex.conn.onAnswer(this.ex, chunk);
      else sock.destroy(); // nothing asked: an engine that talks out of turn is not reused
    });
    sock.on('drain', () => this.ex?.conn.sock.resume());
    sock.on('error', (err: Error) => void (this.error ??= err.message));
    sock.on('close', () => {
      pool.forget(this);
      const ex = this.ex;
      this.ex = null;
      if (ex) ex.conn.onEngineGone(ex, this, this.error ?? 'the engine closed the connection');
    });
  }
}

/** Keep-alive connections to the node's engines, by loopback port. */
class UpstreamPool {
  private readonly idle = new Map<number, Upstream[]>();
  private sweeper: NodeJS.Timeout | null = null;

  constructor(private readonly host: string) {}

  take(port: number): Upstream {
    const u = this.idle.get(port)?.pop();
    if (u) {
      u.fresh = false;
      return u;
    }
    return this.open(port);
  }

  open(port: number): Upstream {
    return new Upstream(this, port, connect({ host: this.host, port }));
  }

  give(u: Upstream): void {
    let list = this.idle.get(u.port);
    if (!list) this.idle.set(u.port, (list = []));
    if (list.length >= MAX_IDLE_PER_ENGINE) return void u.sock.destroy();
    u.idleSince = Date.now();
    list.push(u);
    this.sweeper ??= setInterval(() => this.sweep(), SWEEP_MS).unref();
  }

  /** Drops the connections idle for UPSTREAM_IDLE_MS (the oldest are first in each list). */
  private sweep(): void {
    const before = Date.now() - UPSTREAM_IDLE_MS;
    for (const list of this.idle.values())
      while (list.length > 0 && (list[0] as Upstream).idleSince <= before) (list.shift() as Upstream).sock.destroy();
  }

  forget(u: Upstream): void {
    const list = this.idle.get(u.port);
    const i = list ? list.indexOf(u) : -1;
    if (i >= 0) list?.splice(i, 1);
  }

  destroy(): void {
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = null;
    for (const list of this.idle.values()) for (const u of [...list]) u.sock.destroy();
    this.idle.clear();
  }
}

/** One gateway connection: its requests in turn. */
class Connection {
  /** Read from the client, not yet taken by a request (a head in parts, or the next pipelined request). */
  private buf: Buffer | null = null;
  private ex: Exchange | null = null;
  private verdict: Verdict | Promise<Verdict> | null = null;
  private headTimer: NodeJS.Timeout | null = null;
  closed = false;

  constructor(
    private readonly relay: Relay,
    readonly sock: TLSSocket,
  ) {
    sock.setNoDelay(true);
    sock.setTimeout(CLIENT_IDLE_MS);
    sock.on('timeout', () => {
      if (!this.ex) sock.destroy();
    });
    sock.on('data', (chunk: Buffer) => this.onData(chunk));
    sock.on('drain', () => this.ex?.up?.sock.resume());
    sock.on('error', () => undefined);
    sock.on('close', () => this.onClose());
  }

  private onData(chunk: Buffer): void {
    if (this.closed) return;
    const ex = this.ex;
    if (ex?.started && ex.bodyOpen) {
      const n = this.body(ex, chunk);
      if (n < chunk.length && !this.closed) this.hold(chunk.subarray(n));
      return;
    }
    this.hold(chunk);
    if (!this.ex) this.next();
  }

  /** Keeps bytes for the next request; while one is in progress, reading stops until it ends. */
  private hold(chunk: Buffer): void {
    this.buf = this.buf ? Buffer.concat([this.buf, chunk]) : chunk;
    if (this.ex) this.sock.pause();
  }

  /** Starts the next request held in `buf`, once its head is complete. */
  private next(): void {
    const buf = this.buf;
    if (!buf || this.closed) return;
    const end = headEnd(buf);
    if (end < 0 || end > MAX_REQUEST_HEAD) {
      if (buf.length > MAX_REQUEST_HEAD || end > MAX_REQUEST_HEAD)
        return this.refuse(431, `the request head is larger than ${MAX_REQUEST_HEAD} bytes`);
      this.headTimer ??= setTimeout(
        () => this.refuse(408, `the request head did not arrive within ${HEAD_MS / 1000} s`),
        HEAD_MS,
      );
      return;
    }
    if (this.headTimer) clearTimeout(this.headTimer);
    this.headTimer = null;
    let head: Head;
    let body: BodyFrame;
    try {
      head = parseHead(buf.subarray(0, end), 'request');
      body = requestFrame(head);
    } catch (err) {
      return this.refuse(err instanceof FrameError ? err.status : 400, (err as Error).message);
    }
    this.buf = end < buf.length ? buf.subarray(end) : null;
    const [method, target, version] = head.start;
    const keepAlive = version === 'HTTP/1.1' && !connectionHas(head, 'close');
    const ex = new Exchange(this, method, target, keepAlive, body);
    this.ex = ex;
    this.relay.active++;
    const v = (this.verdict ??= this.relay.hooks.judge(this.sock));
    if (!(v instanceof Promise)) return this.start(ex, head, v);
    this.sock.pause();
    v.then(
      (r) => {
        this.verdict = r;
        if (this.closed) return;
        this.sock.resume();
        this.start(ex, head, r);
      },
      (err: Error) => {
        this.verdict = null;
        if (!this.closed) this.local(ex, this.relay.hooks.internal(err));
      },
    );
  }

  private start(ex: Exchange, head: Head, v: Verdict): void {
    if (!v.ok) {
      // A refused certificate stays refused on this connection: answered, then closed once its body is read past
      // (closed with unread bytes, the kernel would reset the connection and the client might lose the answer).
      ex.keepAlive = false;
      return this.local(ex, this.relay.hooks.refused(v, ex.target));
    }
    const d = this.relay.hooks.decide(ex.method, ex.target);
    if (d.kind === 'answer') return this.local(ex, d);
    ex.to = { port: d.port, replica: d.replica };
    let text = `${ex.method} ${d.path} HTTP/1.1\r\nhost: ${this.relay.engineHost}:${d.port}\r\n`;
    for (const f of head.fields) if (!REQUEST_DROP.has(f.name)) text += `${f.line}\r\n`;
    if (ex.body.kind === 'chunked') text += 'transfer-encoding: chunked\r\n';
    let out = Buffer.from(`${text}\r\n`, 'latin1');
    // The body bytes already read go with the head, in one write.
    const held = this.buf;
    if (held && ex.bodyOpen) {
      let n: number;
      try {
        n = ex.body.take(held);
      } catch (err) {
        return this.refuse((err as FrameError).status ?? 400, (err as Error).message);
      }
      out = Buffer.concat([out, held.subarray(0, n)]);
      this.buf = n < held.length ? held.subarray(n) : null;
      ex.bodyOpen = !ex.body.done;
    }
    if (!ex.bodyOpen) ex.replay = out;
    this.send(ex, this.relay.pool.take(d.port), out);
  }

  /** Writes a request (or its start) to an engine connection. */
  private send(ex: Exchange, up: Upstream, bytes: Buffer): void {
    ex.up = up;
    up.ex = ex;
    if (!up.sock.write(bytes)) this.sock.pause();
  }

  /** Request body bytes from the client: to the engine, or dropped after the door's own answer. */
  private body(ex: Exchange, chunk: Buffer): number {
    let n: number;
    try {
      n = ex.body.take(chunk);
    } catch (err) {
      this.refuse((err as FrameError).status ?? 400, (err as Error).message);
      return chunk.length;
    }
    if (ex.up && n > 0 && !ex.up.sock.write(n === chunk.length ? chunk : chunk.subarray(0, n))) this.sock.pause();
    if (ex.body.done) {
      ex.bodyOpen = false;
      // After the door's own answer, or an engine's that came before the whole body.
      if (ex.answered && (ex.answer === null || ex.answer.done)) this.end(ex);
    }
    return n;
  }

  /** The door's own answer; the request's body (if any) is read and dropped before the next request. */
  private local(ex: Exchange, a: LocalAnswer): void {
    this.writeAnswer(a, !ex.keepAlive || this.relay.draining);
    ex.answered = true;
    if (!ex.bodyOpen) return this.end(ex);
    this.sock.resume(); // the body is read past now, whatever engine connection it waited on
    const held = this.buf;
    this.buf = null;
    if (held) {
      const n = this.body(ex, held);
      if (n < held.length && !this.closed) this.buf = held.subarray(n);
    }
  }

  /** The door's own answer, head and body in one write. */
  private writeAnswer(a: LocalAnswer, close: boolean): void {
    const body = Buffer.from(a.body);
    let head = `HTTP/1.1 ${a.status} ${STATUS_CODES[a.status] ?? ''}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n`;
    for (const [k, v] of Object.entries(a.headers ?? {})) head += `${k}: ${v}\r\n`;
    if (close) head += 'connection: close\r\n';
    this.sock.write(Buffer.concat([Buffer.from(`${head}\r\n`, 'latin1'), body]));
  }

  /** Bytes of the engine's answer. */
  onAnswer(ex: Exchange, chunk: Buffer): void {
    if (ex.ended) return;
    if (ex.answer === null) {
      let buf = ex.answerHead ? Buffer.concat([ex.answerHead, chunk]) : chunk;
      for (;;) {
        const end = headEnd(buf);
        if (end < 0) {
          if (buf.length > MAX_ANSWER_HEAD)
            return this.engineFailed(ex, `an answer head over ${MAX_ANSWER_HEAD} bytes`);
          ex.answerHead = buf;
          return;
        }
        let head: Head;
        try {
          head = parseHead(buf.subarray(0, end), 'answer');
        } catch (err) {
          return this.engineFailed(ex, (err as Error).message);
        }
        const status = Number(head.start[1]);
        if (status === 101) return this.engineFailed(ex, 'the engine switched protocols, which a door does not relay');
        if (status >= 200) {
          ex.answerHead = null;
          return this.passHead(ex, head, buf.subarray(end));
        }
        // An interim answer (100 Continue, 103): passed on as it came; the final head follows.
        this.sock.write(buf.subarray(0, end));
        buf = buf.subarray(end);
        if (buf.length === 0) {
          ex.answerHead = null;
          return;
        }
      }
    }
    this.answerBody(ex, chunk);
  }

  private passHead(ex: Exchange, head: Head, rest: Buffer): void {
    let frame: BodyFrame;
    try {
      frame = answerFrame(head, ex.method);
    } catch (err) {
      return this.engineFailed(ex, (err as Error).message);
    }
    ex.answer = frame;
    if (connectionHas(head, 'close')) ex.reusable = false;
    const [, status, reason] = head.start;
    let text = `HTTP/1.1 ${status} ${reason}\r\n`;
    for (const f of head.fields) if (!ANSWER_DROP.has(f.name)) text += `${f.line}\r\n`;
    if (ex.rechunk) text += 'transfer-encoding: chunked\r\n';
    if (!ex.keepAlive || this.relay.draining) text += 'connection: close\r\n';
    ex.answered = true;
    ex.replay = null;
    const headBytes = Buffer.from(`${text}\r\n`, 'latin1');
    const n = frame.take(rest);
    if (n < rest.length) ex.reusable = false; // bytes past the answer's end: the engine is out of step
    this.write(ex, rest.length === 0 ? [headBytes] : [headBytes, ...this.framed(ex, rest.subarray(0, n))]);
    if (frame.done) this.answered(ex);
  }

  private answerBody(ex: Exchange, chunk: Buffer): void {
    const frame = ex.answer as BodyFrame;
    const n = frame.take(chunk);
    if (n < chunk.length) ex.reusable = false;
    if (n > 0) this.write(ex, this.framed(ex, n === chunk.length ? chunk : chunk.subarray(0, n)));
    if (frame.done) this.answered(ex);
  }

  /** Answer body bytes as they go to the client: as they came, or as one chunk of a rechunked answer. */
  private framed(ex: Exchange, bytes: Buffer): Buffer[] {
    if (!ex.rechunk || bytes.length === 0) return bytes.length ? [bytes] : [];
    return [Buffer.from(`${bytes.length.toString(16)}\r\n`, 'latin1'), bytes, CRLF];
  }

  /** To the client, in one write; a client that reads slower than the engine answers pauses the engine. */
  private write(ex: Exchange, parts: Buffer[]): void {
    if (parts.length === 0) return;
    const bytes = parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts);
    if (!this.sock.write(bytes)) ex.up?.sock.pause();
  }

  /** The engine's answer is complete. */
  private answered(ex: Exchange): void {
    const up = ex.up;
    if (up) {
      up.ex = null;
      ex.up = null;
      // A request whose body is still arriving leaves the engine connection out of step: not reused.
      if (ex.reusable && !ex.bodyOpen) this.relay.pool.give(up);
      else up.sock.destroy();
    }
    if (ex.bodyOpen) {
      // The engine answered before it read the whole body (its engine connection is dropped): the rest is read past,
      // then the connection closes — closed with unread bytes, the kernel would reset it under the answer.
      ex.keepAlive = false;
      return void this.sock.resume(); // it may have waited on the engine connection's drain
    }
    this.end(ex);
  }

  /** The engine connection closed (or failed) while `ex` used it. */
  onEngineGone(ex: Exchange, up: Upstream, error: string): void {
    if (ex.ended || ex.up !== up) return;
    ex.up = null;
    if (!ex.answered) {
      // A kept-alive connection the engine closed as the request went out: the whole request once more, fresh.
      if (ex.replay && !up.fresh && ex.answerHead === null && ex.to) {
        const again = ex.replay;
        ex.replay = null;
        return this.send(ex, this.relay.pool.open(ex.to.port), again);
      }
      return this.engineFailed(ex, error);
    }
    if (ex.rechunk) {
      this.sock.write(CHUNK_END);
      return this.end(ex);
    }
    // Cut mid-answer: the client's connection goes too, so the answer is never taken for complete.
    this.end(ex);
    this.sock.destroy();
  }

  /** The engine failed before its answer began (a 502 to the client), or mid-answer (the connection is cut). */
  private engineFailed(ex: Exchange, error: string): void {
    dropEngine(ex);
    if (ex.answered) {
      this.end(ex);
      return void this.sock.destroy();
    }
    ex.answerHead = null;
    this.local(ex, this.relay.hooks.failed(ex.to ?? { port: 0, replica: '?' }, error));
  }

  /** The request is over: the connection takes the next one, or closes. */
  private end(ex: Exchange): void {
    if (!this.settle(ex)) return;
    this.ex = null;
    if (this.closed) return;
    if (!ex.keepAlive || this.relay.draining) {
      this.closed = true;
      return void this.sock.end();
    }
    this.sock.resume();
    if (this.buf) this.next();
  }

  /** A request the door cannot read: answered, then the connection closes (what follows cannot be framed). */
  private refuse(status: number, message: string): void {
    if (this.closed) return;
    const ex = this.ex;
    if (ex) {
      dropEngine(ex);
      this.settle(ex);
    }
    if (!ex?.answered) this.writeAnswer(jsonAnswer('LLMGW_BAD_REQUEST', status, `node door: ${message}`), true);
    this.ex = null;
    this.buf = null;
    this.closed = true;
    this.sock.end();
  }

  private onClose(): void {
    if (this.headTimer) clearTimeout(this.headTimer);
    this.relay.connections.delete(this);
    const ex = this.ex;
    this.closed = true;
    this.ex = null;
    this.buf = null;
    // The client left: its engine request goes too (the engine stops generating).
    if (ex && this.settle(ex)) dropEngine(ex);
  }

  /** Marks a request over (counted out of the relay's active ones) once; false when it already was. */
  private settle(ex: Exchange): boolean {
    if (ex.ended) return false;
    ex.ended = true;
    this.relay.active--;
    return true;
  }

  /** Closes the connection once its request in progress (if any) is answered. */
  closeWhenIdle(): void {
    if (this.ex === null && !this.closed) {
      this.closed = true;
      this.sock.end();
    }
  }
}

/** Takes a request's engine connection from it and closes it (out of step, or its request is given up). */
function dropEngine(ex: Exchange): void {
  const up = ex.up;
  if (!up) return;
  up.ex = null;
  ex.up = null;
  up.sock.destroy();
}

/** The relay of one door: its connections, its engine pool and whether it drains. */
export class Relay {
  /** Requests being answered now. */
  active = 0;
  /** Set by a drain: every answer closes its connection after it. */
  draining = false;
  readonly connections = new Set<Connection>();
  readonly pool: UpstreamPool;

  constructor(
    readonly hooks: RelayHooks,
    readonly engineHost: string,
  ) {
    this.pool = new UpstreamPool(engineHost);
  }

  /** Serves a client's (TLS) connection. */
  accept(sock: TLSSocket): void {
    this.connections.add(new Connection(this, sock));
  }

  /** From now on every answer closes its connection; idle connections close now. */
  drain(): void {
    this.draining = true;
    for (const c of this.connections) c.closeWhenIdle();
  }

  /** Drops every engine connection. */
  destroy(): void {
    this.pool.destroy();
  }
}
