/** Forwards one inference request to a replica and streams the answer back, retrying elsewhere before the first byte. */
import { request, type Agent, type ClientRequest, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import { openAiError } from '../../lib/errors';
import type { RoutableReplica, RoutingTable } from './routing';

/** What a proxied request needs besides the request itself. */
export interface ProxyDeps {
  routing: RoutingTable;
  /** A keep-alive agent shared by all requests, so the gateway reuses upstream connections. */
  agent: Agent;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

/** One request to proxy: the replica picked first, and the raw body bytes as the client sent them. */
export interface ProxyCall {
  model: string;
  path: string;
  body: Buffer;
  first: RoutableReplica;
  req: IncomingMessage;
  res: ServerResponse;
}

// Response headers worth passing through; hop-by-hop ones (connection, transfer-encoding) are Node's business.
const PASS_HEADERS = ['content-type', 'content-length', 'cache-control', 'x-request-id'] as const;

/**
 * Sends `call` to `call.first`, then to other ready replicas while nothing has reached the client:
 * on a connection or send error, or a 5xx answer when another replica is left. Once bytes flow, an upstream
 * failure aborts the client response (a truncated stream must not look complete). Releases in-flight counts on every path.
 */
export function proxyRequest(deps: ProxyDeps, call: ProxyCall): void {
  const { routing, agent, log } = deps;
  const { res } = call;
  const tried = new Set<string>();
  let current: ClientRequest | null = null;
  let clientGone = false;

  // A client that disconnects before the response is complete takes the upstream request with it.
  res.once('close', () => {
    if (res.writableFinished) return;
    clientGone = true;
    current?.destroy();
  });

  const fail = (message: string): void => {
    if (clientGone || res.headersSent) return void res.destroy();
    const body = JSON.stringify(openAiError('LLMGW_UPSTREAM_FAILED', message));
    res.writeHead(502, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
  };

  const next = (failed: RoutableReplica, why: string): void => {
    tried.add(failed.id);
    if (clientGone) return;
    const p = routing.pick(call.model, tried);
    if (p.kind !== 'ok') return fail(`model ${call.model}: every replica failed (${[...tried].join(', ')}); last error: ${why}`);
    log('retrying on another replica', { model: call.model, failed: failed.id, next: p.replica.id, error: why });
    attempt(p.replica, true);
  };

  const attempt = (replica: RoutableReplica, staleRetryAllowed: boolean): void => {
    routing.acquire(replica.id);
    let released = false;
    const release = (): void => {
      if (!released) routing.release(replica.id);
      released = true;
    };
    const headers: OutgoingHttpHeaders = { 'content-type': 'application/json', 'content-length': call.body.length };
    if (call.req.headers.accept) headers.accept = call.req.headers.accept;
    const upReq = request({ agent, host: replica.host, port: replica.port, path: call.path, method: 'POST', headers });
    current = upReq;

    upReq.on('socket', (s) => s.setNoDelay(true));
    upReq.on('error', (err: NodeJS.ErrnoException) => {
      release();
      if (clientGone) return;
      if (res.headersSent) return void res.destroy(err);
      // A pooled connection the replica closed while idle: not the replica's fault, try it once more.
      if (staleRetryAllowed && upReq.reusedSocket && err.code === 'ECONNRESET') return attempt(replica, false);
      next(replica, `${replica.id}: ${err.message}`);
    });

    upReq.on('response', (upRes) => {
      const status = upRes.statusCode ?? 502;
      if (status >= 500 && !clientGone && routing.pick(call.model, new Set([...tried, replica.id])).kind === 'ok') {
        upRes.resume();
        upRes.once('close', release);
        return next(replica, `${replica.id} answered ${status}`);
      }
      const out: Record<string, string | string[]> = {};
      for (const h of PASS_HEADERS) {
        const v = upRes.headers[h];
        if (v !== undefined) out[h] = v;
      }
      res.writeHead(status, out);
      // Streams start with headers only; pass them on so the client sees 200 before the first token.
      if (String(upRes.headers['content-type']).startsWith('text/event-stream')) res.flushHeaders();
      // pipe rather than pipeline: pipeline builds an AbortSignal per call, measurable at this request rate.
      upRes.on('error', () => undefined); // 'close' below handles it
      upRes.once('close', () => {
        release();
        if (upRes.complete) return;
        // The replica died mid-response: abort the client so a truncated answer never looks complete.
        res.destroy();
        if (!clientGone) log('upstream failed mid-response', { model: call.model, replica: replica.id });
      });
      upRes.pipe(res);
    });

    upReq.end(call.body);
  };

  attempt(call.first, true);
}
