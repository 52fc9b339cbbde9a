/**
 * The gateway's fast path: a node:http handler in front of fastify that serves the three inference routes (POST
 * /v1/chat/completions, /v1/completions, /v1/embeddings) itself — request id, CORS headers, access log, key check,
 * the body read within its limit, then the same work as the fastify routes (inference.ts) — and hands every other
 * request to fastify untouched. fastify's request lifecycle (routing, hooks, content-type parsing, reply objects,
 * hijacking) cost about 0.3 ms and 25 % more CPU per request than a bare node:http proxy (docs/architecture.md,
 * "Beside other proxies").
 *
 * It takes only what it answers exactly as the fastify routes would: a request whose content type is not plainly
 * `application/json`, whose Content-Length is over the limit, whose URL has a query string, or that arrives while
 * the server closes goes to fastify, which answers it as before (415, 413, 503). Its own answers have the same
 * status, OpenAI error shape, headers and metrics as fastify's.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { ERRORS, openAiError, type ErrorCode } from '../../lib/errors';
import type { KeyRecord } from '../../lib/store/keys';
import { corsHeaders } from './cors';
import type { Exchange, Inference } from './inference';
import { accessLine, requestId, type AccessNote } from './log';
import { PROXIED, type ProxiedPath } from './request-check';

/** A node:http request handler. */
export type Handler = (req: IncomingMessage, res: ServerResponse) => void;

const PATHS = new Map<string, ProxiedPath>(PROXIED.map((p) => [p, p]));

/** A request answered by the fast path, for the inference routes (inference.ts). */
class RawExchange implements Exchange {
  apiKey: KeyRecord | null = null;
  model = '';
  readonly arrivedAt: number;
  note: AccessNote | undefined = undefined;

  constructor(
    private readonly inference: Inference,
    readonly id: string,
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    arrivedAt: number,
  ) {
    this.arrivedAt = arrivedAt;
  }

  /** As fastify sends the gateway's errors: JSON with a content-length, counted in the metrics. */
  fail(code: ErrorCode, message: string, retryAfterS?: number): void {
    const status = ERRORS[code].status;
    const body = JSON.stringify(openAiError(code, message));
    const headers: OutgoingHttpHeaders = {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(body),
    };
    if (retryAfterS !== undefined) headers['retry-after'] = String(retryAfterS);
    const { res } = this;
    if (!res.headersSent) res.writeHead(status, headers).end(body);
    this.inference.answered(this.model, this.apiKey, this.req.headers.authorization, status);
  }

  hijack(): void {
    // The response is the proxy's (or nobody's) already: nothing to take over.
  }

  /** The body so far; `over` once it passed the limit (answered 413: what follows is dropped). */
  private chunks: Buffer[] = [];
  private received = 0;
  private over = false;

  data(chunk: Buffer): void {
    if (this.over) return;
    this.received += chunk.length;
    const limit = this.inference.bodyLimit;
    if (this.received > limit) {
      this.over = true;
      this.chunks = [];
      return this.fail('LLMGW_BODY_TOO_LARGE', `the request body is larger than this route takes (${limit} bytes)`);
    }
    this.chunks.push(chunk);
  }

  error(err: Error): void {
    if (this.over) return;
    this.over = true;
    this.fail('LLMGW_BAD_REQUEST', err.message);
  }

  /** The whole body is in: served. */
  end(path: ProxiedPath, declared: number): void {
    if (this.over) return;
    this.over = true;
    if (!Number.isNaN(declared) && this.received !== declared)
      return this.fail('LLMGW_BAD_REQUEST', 'Request body size did not match Content-Length');
    // One chunk (most requests) is the body as it is: Node's HTTP parser hands each body chunk over as a buffer of
    // its own (node_http_parser.cc on_body: Buffer::Copy), so nothing else writes into it, and another copy would
    // only cost an allocation per request.
    const body = this.chunks.length === 1 ? (this.chunks[0] as Buffer) : Buffer.concat(this.chunks, this.received);
    this.chunks = [];
    try {
      const served = this.inference.serve(this, path, body);
      if (served) served.catch((err: unknown) => this.internal(err));
    } catch (err) {
      this.internal(err);
    }
  }

  /** What a route that threw gets: logged with its stack, answered 500 naming only the request id. */
  internal(err: unknown): void {
    const e = err instanceof Error ? err : new Error(String(err));
    this.inference.log('internal error', {
      level: 'error',
      method: this.req.method,
      route: this.req.url,
      reqId: this.id,
      error: e.message,
      stack: e.stack,
    });
    if (this.res.headersSent) return void this.res.destroy();
    this.fail('LLMGW_INTERNAL', `internal error (request ${this.id}); the server's log has the details`);
  }
}

/** True for the content types the fast path takes; any other (even one fastify accepts) is fastify's to judge. */
const plainJson = (ct: string | undefined): boolean =>
  ct === 'application/json' || ct === 'application/json; charset=utf-8';

/**
 * The server's request handler: the inference routes here, everything else (and whatever the fast path does not
 * answer exactly as fastify would) to `fallback`, fastify's own handler. `closing` says fastify is closing (it then
 * answers 503).
 */
export function fastPath(inference: Inference, fallback: Handler, closing: () => boolean): Handler {
  const { metrics, origins, bodyLimit, accessLog, log } = inference;
  return (req, res) => {
    const path = req.method === 'POST' ? PATHS.get(req.url as string) : undefined;
    const { headers } = req;
    if (path === undefined || !plainJson(headers['content-type']) || closing()) return fallback(req, res);
    const length = headers['content-length'];
    const declared = length === undefined ? Number.NaN : Number(length);
    if (declared > bodyLimit) return fallback(req, res);

    const id = requestId(headers['x-request-id']);
    const x = new RawExchange(inference, id, req, res, metrics ? performance.now() : 0);
    res.setHeader('x-request-id', id);
    if (headers.origin !== undefined) corsHeaders(origins, headers.origin, res);
    if (accessLog) x.note = accessLine(log, id, req, res);
    const auth = inference.authenticate(headers.authorization);
    if (auth.kind === 'refused') return x.fail('LLMGW_INVALID_API_KEY', auth.message);
    if (auth.kind === 'key') x.apiKey = auth.key;

    // The body, read as fastify's parser reads it (content-type-parser.js rawBody): bounded, its length checked
    // against Content-Length. Plain listeners that stay (no removal, no named
    // closures): a body past the limit is answered 413 and the rest of it flows to nowhere, as with fastify.
    req.on('data', (chunk: Buffer) => x.data(chunk));
    req.on('end', () => x.end(path, declared));
    req.on('error', (err: Error) => x.error(err));
  };
}
