/**
 * One timed completion request over node:http (or https) and a keep-alive agent: the load generator's hot path,
 * cheap enough for thousands of requests a second (no fetch, no stream objects of our own).
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { performance } from 'node:perf_hooks';
import { errorMessageOf, StreamReader, usageOf } from './sse';

/** Where requests go: a completions URL, its headers, and a connection pool for it. */
export interface Target {
  url: URL;
  headers: OutgoingHttpHeaders;
  agent: HttpAgent;
}

/** What happened to one request; times are ms since `start` on the performance clock. */
export interface Outcome {
  ok: boolean;
  status: number;
  /** Why it failed (`HTTP 503`, `timeout`, `ECONNREFUSED`, `incomplete stream`, …), null when ok */
  kind: string | null;
  /** The server's error message or the body's first bytes, for the first failures shown */
  message: string | null;
  start: number;
  /** The response's first body byte */
  ttfb: number;
  /** The first token: a stream's first token event, a whole answer's end */
  ttft: number;
  total: number;
  promptTokens: number;
  completionTokens: number;
  /** Gaps between a stream's token events, ms (empty when not streamed) */
  gaps: number[];
}

/** A connection pool of `sockets` keep-alive connections for `url` (http or https). */
export function keepAliveAgent(url: URL, sockets: number): HttpAgent {
  // lifo keeps the busiest connections warm; the sockets limit is the concurrency, so none waits for a socket.
  const o = { keepAlive: true, maxSockets: sockets, maxFreeSockets: sockets, scheduling: 'lifo' as const };
  return url.protocol === 'https:' ? new HttpsAgent(o) : new HttpAgent(o);
}

/** A target for `url` with a bearer key (when given) and one pool of `sockets` connections. */
export function makeTarget(url: URL, apiKey: string | undefined, sockets: number): Target {
  const headers: OutgoingHttpHeaders = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
  };
  if (apiKey) headers.authorization = `Bearer ${apiKey}`;
  return { url, headers, agent: keepAliveAgent(url, sockets) };
}

/**
 * Sends one POST of `body` (bytes when it is sent many times: a large string is encoded again on every send);
 * resolves (never rejects) once the answer is whole, broken or timed out (`timeoutMs` without data).
 */
export function sendOne(t: Target, body: string | Uint8Array, stream: boolean, timeoutMs: number): Promise<Outcome> {
  return new Promise((resolve) => {
    const o: Outcome = {
      ok: false,
      status: 0,
      kind: null,
      message: null,
      start: performance.now(),
      ttfb: 0,
      ttft: 0,
      total: 0,
      promptTokens: 0,
      completionTokens: 0,
      gaps: [],
    };
    let settled = false;
    const finish = (kind: string | null, message: string | null = null): void => {
      if (settled) return;
      settled = true;
      o.total = performance.now() - o.start;
      o.ok = kind === null;
      o.kind = kind;
      o.message = message;
      resolve(o);
    };
    const send = t.url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(
      t.url,
      {
        method: 'POST',
        agent: t.agent,
        headers: { ...t.headers, 'content-length': typeof body === 'string' ? Buffer.byteLength(body) : body.length },
      },
      (res: IncomingMessage) => {
        o.status = res.statusCode ?? 0;
        res.setEncoding('utf8');
        const sse =
          stream && o.status === 200 && String(res.headers['content-type']).startsWith('text/event-stream')
            ? new StreamReader()
            : null;
        let text = '';
        res.on('data', (chunk: string) => {
          const now = performance.now() - o.start;
          if (o.ttfb === 0) o.ttfb = now;
          if (sse) sse.push(chunk, now);
          else text += chunk;
        });
        res.on('error', () => undefined); // 'close' below judges a broken answer
        res.on('close', () => {
          if (!res.complete) return finish('connection closed mid-answer');
          if (sse) {
            o.ttft = sse.firstTokenAt ?? o.total;
            o.gaps = sse.gaps;
            o.promptTokens = sse.usage?.promptTokens ?? 0;
            o.completionTokens = sse.usage?.completionTokens ?? sse.tokenEvents;
            if (sse.error !== null) return finish('error event', sse.error);
            return finish(
              sse.done ? null : 'incomplete stream',
              sse.done ? null : 'the stream ended without data: [DONE]',
            );
          }
          let parsed: unknown;
          try {
            parsed = JSON.parse(text);
          } catch {
            parsed = undefined;
          }
          if (o.status !== 200) return finish(`HTTP ${o.status}`, errorMessageOf(parsed) ?? text.slice(0, 200));
          if (parsed === undefined) return finish(stream ? 'not a stream' : 'body not JSON', text.slice(0, 200));
          const usage = usageOf(parsed);
          o.promptTokens = usage?.promptTokens ?? 0;
          o.completionTokens = usage?.completionTokens ?? 0;
          o.ttft = performance.now() - o.start; // not streamed: the first token comes with the last
          finish(null);
        });
      },
    );
    req.on('socket', (s) => s.setNoDelay(true));
    req.setTimeout(timeoutMs, () => {
      finish('timeout', `no data for ${timeoutMs} ms`);
      req.destroy();
    });
    req.on('error', (err: NodeJS.ErrnoException) => finish(err.code ?? 'network error', err.message));
    req.end(body);
  });
}
