/**
 * One ranged GET for the weights fetcher, over undici (on loopback about 1.5x node:http's throughput here):
 * `Range: bytes=N-` (with `If-Range` when a validator is known), redirects followed (a Hugging Face URL answers
 * 302 to its CDN), a peer's mTLS (the node certificate presented, the peer's checked by CA and CN), an idle
 * timeout, and transport errors turned into one sentence that names the URL and the cause.
 */
import type { Readable } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { Agent, buildConnector, interceptors, request, type Dispatcher } from 'undici';
import { nodePeerProblem } from '../pki/peer';

/** TLS to another node's weights endpoint: present this node's certificate, accept only `expectCn`'s. */
export interface PeerTls {
  certPem: string;
  keyPem: string;
  caPem: string;
  /** the node id the peer's certificate must carry as its CN */
  expectCn: string;
}

export interface RangeGetOptions {
  /** first byte wanted (0: the whole file, no Range header) */
  offset: number;
  /** an ETag or Last-Modified from the response the partial began with: a changed file then comes whole (200) */
  ifRange?: string;
  tls?: PeerTls;
  signal?: AbortSignal;
  /** no bytes for this long fails the request (default 60 s) */
  idleTimeoutMs?: number;
}

/** A transport failure (no HTTP answer, or the connection broke): `message` names the URL and the cause. */
export class TransportError extends Error {
  constructor(
    message: string,
    readonly reason: string,
  ) {
    super(message);
  }
}

/** A response: status, headers (lower-case names) and the body, unread. */
export interface RangeResponse {
  statusCode: number;
  headers: Record<string, string | undefined>;
  body: Readable;
}

/** "connection refused", "host not found", … for a socket or undici error. */
export function describeTransportError(err: NodeJS.ErrnoException): string {
  const code = err.code ?? (err.cause as NodeJS.ErrnoException | undefined)?.code;
  switch (code) {
    case 'ECONNREFUSED':
      return 'connection refused (nothing listens there)';
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return 'host not found (DNS)';
    case 'ECONNRESET':
      return 'connection reset by the server';
    case 'ETIMEDOUT':
    case 'UND_ERR_CONNECT_TIMEOUT':
      return 'connection timed out';
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return 'host unreachable';
    case 'UND_ERR_SOCKET':
      return 'the server closed the connection';
    case 'UND_ERR_HEADERS_TIMEOUT':
    case 'UND_ERR_BODY_TIMEOUT':
      return 'no data from the server for too long';
    case 'UND_ERR_REQ_CONTENT_LENGTH_MISMATCH':
    case 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH':
      return 'the body was shorter than its Content-Length';
    default:
      return code ? `${code}: ${err.message}` : err.message;
  }
}

/** A one-connection dispatcher for one transfer; for a peer, its connector checks the peer's certificate. */
function dispatcherFor(o: RangeGetOptions): Dispatcher {
  const idle = o.idleTimeoutMs ?? 60_000;
  const base = { connections: 1, headersTimeout: idle, bodyTimeout: idle };
  const tls = o.tls;
  if (!tls) return new Agent(base).compose(interceptors.redirect({ maxRedirections: 5 }));
  // Node certificates are clientAuth only, so OpenSSL would refuse one as a server's: checked here instead.
  const connector = buildConnector({ cert: tls.certPem, key: tls.keyPem, ca: tls.caPem, rejectUnauthorized: false });
  return new Agent({
    ...base,
    connect: (opts, cb) =>
      connector(opts, (err, socket) => {
        if (err || !socket) return cb(err ?? new Error('no socket'), null);
        const problem = nodePeerProblem(socket as TLSSocket, tls);
        if (!problem) return cb(null, socket);
        socket.destroy();
        return cb(Object.assign(new Error(`peer certificate refused: ${problem}`), { code: 'LLMGW_PEER_CERT' }), null);
      }),
  });
}

/**
 * Sends a GET for `url` from byte `offset` and resolves with the response (any status; the body unread).
 * Rejects with a TransportError when no response comes.
 */
export async function rangeGet(url: string, o: RangeGetOptions): Promise<RangeResponse> {
  const headers: Record<string, string> = { 'accept-encoding': 'identity', 'user-agent': 'llmgw-weights' };
  if (o.offset > 0) headers.range = `bytes=${o.offset}-`;
  if (o.offset > 0 && o.ifRange) headers['if-range'] = o.ifRange;
  const dispatcher = dispatcherFor(o);
  const close = (): void => void dispatcher.destroy().catch(() => undefined);
  let res: Dispatcher.ResponseData;
  try {
    res = await request(url, { method: 'GET', headers, signal: o.signal, dispatcher });
  } catch (err) {
    close();
    const e = err as NodeJS.ErrnoException;
    if (o.signal?.aborted) throw err;
    const cause = e.code === 'LLMGW_PEER_CERT' ? e.message : describeTransportError(e);
    throw new TransportError(`GET ${url}: ${cause}`, cause);
  }
  res.body.once('close', close);
  const flat: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(res.headers)) flat[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
  return { statusCode: res.statusCode, headers: flat, body: res.body };
}

/** The start and total of a `Content-Range: bytes START-END/TOTAL` (or `bytes *\/TOTAL`) header. */
export function parseContentRange(h: string | undefined): { start: number | null; total: number | null } | null {
  const m = /^bytes (?:(\d+)-\d+|\*)\/(\d+|\*)$/.exec((h ?? '').trim());
  if (!m) return null;
  return {
    start: m[1] === undefined ? null : Number(m[1]),
    total: m[2] === '*' || m[2] === undefined ? null : Number(m[2]),
  };
}
