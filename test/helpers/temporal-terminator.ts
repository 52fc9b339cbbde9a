/**
 * A TLS terminator in front of a Temporal dev server, as a production Temporal is reached: HTTP/2 over TLS with
 * the server certificate of a CA of its own, client certificates required (rejectUnauthorized), and optionally an
 * API key required in the `authorization` header (Temporal Cloud answers UNAUTHENTICATED without the right one).
 * Calls that pass are relayed to the dev server's plaintext port.
 */
import http2, {
  type ClientHttp2Session,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
  type ServerHttp2Session,
} from 'node:http2';
import type { AddressInfo } from 'node:net';

export interface TerminatorOptions {
  /** host:port of the dev server (plaintext) */
  upstream: string;
  /** the terminator's server certificate and key, and the CA client certificates must come from */
  certPem: string;
  keyPem: string;
  clientCaPem: string;
  /** when set, every call must carry `authorization: Bearer <apiKey>` */
  apiKey?: string;
}

export interface Terminator {
  address: string;
  /** TLS handshakes refused (no client certificate, an unknown CA, an expired one), and calls refused for their key */
  refused: { handshakes: number; calls: number };
  /** the authorization headers seen, in order */
  authorizations: string[];
  close(): Promise<void>;
}

const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'host']);

function pass(h: IncomingHttpHeaders, keepStatus = false): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(h))
    if (v !== undefined && (keepStatus ? k === ':status' || !k.startsWith(':') : !k.startsWith(':')) && !HOP.has(k))
      out[k] = v;
  return out;
}

/** Starts the terminator on 127.0.0.1 and a free port. */
export async function startTemporalTerminator(o: TerminatorOptions): Promise<Terminator> {
  const refused = { handshakes: 0, calls: 0 };
  const authorizations: string[] = [];
  const sessions = new Set<ServerHttp2Session>();
  let up: ClientHttp2Session | null = null;
  const upstream = (): ClientHttp2Session => {
    if (up && !up.closed && !up.destroyed) return up;
    const s = http2.connect(`http://${o.upstream}`);
    s.on('error', () => undefined);
    s.on('close', () => void (up === s && (up = null)));
    up = s;
    return s;
  };
  const server = http2.createSecureServer({
    cert: o.certPem,
    key: o.keyPem,
    ca: o.clientCaPem,
    requestCert: true,
    rejectUnauthorized: true,
    ALPNProtocols: ['h2'],
  });
  server.on('tlsClientError', () => void refused.handshakes++);
  server.on('session', (s) => {
    sessions.add(s);
    s.on('error', () => undefined);
    s.once('close', () => sessions.delete(s));
  });
  server.on('stream', (stream, headers) => {
    stream.on('error', () => undefined);
    const auth = String(headers.authorization ?? '');
    authorizations.push(auth);
    if (o.apiKey !== undefined && auth !== `Bearer ${o.apiKey}`) {
      refused.calls++;
      stream.respond(
        {
          ':status': 200,
          'content-type': 'application/grpc',
          'grpc-status': '16',
          'grpc-message': 'Request unauthorized.',
        },
        { endStream: true },
      );
      return;
    }
    const call = upstream().request({ ...pass(headers), ':method': 'POST', ':path': headers[':path'] });
    call.on('error', () => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
    let trailers: OutgoingHttpHeaders = {};
    call.on('response', (h, flags) => {
      if (flags & 0x1) return stream.respond(pass(h, true), { endStream: true });
      stream.respond(pass(h, true), { waitForTrailers: true });
      call.pipe(stream);
    });
    call.on('trailers', (t) => void (trailers = pass(t)));
    stream.on('wantTrailers', () => stream.sendTrailers(trailers));
    stream.once('close', () => void (call.closed || call.close(http2.constants.NGHTTP2_CANCEL)));
    stream.pipe(call);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    refused,
    authorizations,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of sessions) s.destroy();
      up?.destroy();
      await closed;
    },
  };
}
