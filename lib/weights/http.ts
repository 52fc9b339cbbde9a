/**
 * One ranged GET over node:http/https for the weights fetcher: `Range: bytes=N-` (with `If-Range` when a
 * validator is known), a peer's mTLS (the node certificate presented, the peer's checked by CA and CN), an idle
 * timeout, and transport errors turned into one sentence that names the URL and the cause.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { TLSSocket } from 'node:tls';
import { certificateInfo } from '../pki/info';

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
  constructor(message: string, readonly reason: string) {
    super(message);
  }
}

/** "connection refused", "host not found", … for a socket error code. */
export function describeTransportError(err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'ECONNREFUSED': return 'connection refused (nothing listens there)';
    case 'ENOTFOUND':
    case 'EAI_AGAIN': return 'host not found (DNS)';
    case 'ECONNRESET': return 'connection reset by the server';
    case 'ETIMEDOUT': return 'connection timed out';
    case 'EHOSTUNREACH':
    case 'ENETUNREACH': return 'host unreachable';
    default: return err.code ? `${err.code}: ${err.message}` : err.message;
  }
}

/** Why a peer's certificate is not the one expected, or null when it is. */
function peerCertProblem(socket: TLSSocket, tls: PeerTls): string | null {
  const peer = socket.getPeerCertificate();
  if (!peer?.raw) return 'the peer sent no certificate';
  const info = certificateInfo(peer.raw);
  const now = new Date();
  if (!info.issuerMatches(tls.caPem)) return `the peer's certificate (CN ${info.cn ?? '?'}) is not from this cluster's CA`;
  if (now > info.notAfter || now < info.notBefore) return `the peer's certificate (CN ${info.cn ?? '?'}) is outside its validity`;
  if (info.cn !== tls.expectCn) return `the peer's certificate is ${info.cn ?? 'without a CN'}'s, expected ${tls.expectCn}'s`;
  return null;
}

/**
 * Sends a GET for `url` from byte `offset` and resolves with the response (any status; the body unread).
 * Rejects with a TransportError when no response comes.
 */
export function rangeGet(url: string, o: RangeGetOptions): Promise<IncomingMessage> {
  const u = new URL(url);
  const headers: Record<string, string> = { 'accept-encoding': 'identity', 'user-agent': 'llmgw-weights' };
  if (o.offset > 0) headers.range = `bytes=${o.offset}-`;
  if (o.offset > 0 && o.ifRange) headers['if-range'] = o.ifRange;
  const idle = o.idleTimeoutMs ?? 60_000;
  return new Promise((resolve, reject) => {
    const common = { method: 'GET', headers, signal: o.signal, agent: false as const };
    const req = u.protocol === 'https:'
      // Node certificates are clientAuth only, so OpenSSL would refuse one as a server's: checked here instead.
      ? httpsRequest(u, { ...common, ...(o.tls ? { cert: o.tls.certPem, key: o.tls.keyPem, ca: o.tls.caPem, rejectUnauthorized: false } : {}) })
      : httpRequest(u, common);
    let settled = false;
    const fail = (cause: string): void => {
      if (settled) return;
      settled = true;
      reject(new TransportError(`GET ${url}: ${cause}`, cause));
    };
    req.setTimeout(idle, () => req.destroy(Object.assign(new Error(`no data for ${Math.round(idle / 1000)} s`), { code: 'LLMGW_IDLE' })));
    if (o.tls) {
      const tls = o.tls;
      req.once('socket', (s) => s.once('secureConnect', () => {
        const problem = peerCertProblem(s as TLSSocket, tls);
        if (problem) req.destroy(Object.assign(new Error(`peer certificate refused: ${problem}`), { code: 'LLMGW_PEER_CERT' }));
      }));
    }
    req.once('error', (err: NodeJS.ErrnoException) => {
      if (err.name === 'AbortError') return fail('aborted');
      fail(err.code === 'LLMGW_IDLE' || err.code === 'LLMGW_PEER_CERT' ? err.message : describeTransportError(err));
    });
    req.once('response', (res) => {
      settled = true;
      resolve(res);
    });
    req.end();
  });
}

/** The start and total of a `Content-Range: bytes START-END/TOTAL` (or `bytes *\/TOTAL`) header. */
export function parseContentRange(h: string | undefined): { start: number | null; total: number | null } | null {
  const m = /^bytes (?:(\d+)-\d+|\*)\/(\d+|\*)$/.exec((h ?? '').trim());
  if (!m) return null;
  return { start: m[1] === undefined ? null : Number(m[1]), total: m[2] === '*' || m[2] === undefined ? null : Number(m[2]) };
}
