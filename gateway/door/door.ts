/**
 * Temporal's front door for nodes: a gRPC proxy on HTTP/2 with mutual TLS, in front of Temporal's frontend. A node
 * holds a certificate, not Temporal credentials; the door knows it by the certificate's CN (judged by the control
 * plane's CertificateGate, revocation included) and lets it do its own node's work and nothing else
 * (door-policy.ts). Operator certificates pass unread. What is let through is passed on faithfully: a node's call
 * as the door read it (gunzipped, so Temporal answers uncompressed), an operator's gzip frames as they are,
 * grpc-timeout, headers, trailers and status codes, long polls; a refusal is PERMISSION_DENIED with a grpc-message
 * naming the reason, and one log line naming the CN, the call and the reason.
 */
import http2, {
  type ClientHttp2Session,
  type ClientHttp2Stream,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from 'node:http2';
import { connect, type AddressInfo } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { trackConnections } from '../../lib/connections';
import { temporalTlsConnectOptions, type TemporalCredentials } from '../../lib/temporal-connect';
import { mtlsServerOptions, type CertificateGate, type PeerVerdict } from '../mtls';
import {
  answerToken,
  grpcMethod,
  judgeNodeCall,
  pollResponseToken,
  WORKFLOW_SERVICE,
  type NodeCallVerdict,
} from './policy';
import {
  encodeGrpcMessage,
  frameMessage,
  GRPC,
  grpcTimeoutHeader,
  grpcTimeoutMs,
  messageBytes,
  parseFrames,
} from './grpc-frames';
import { TaskTokenMemory } from './task-tokens';

export interface TemporalDoorOptions {
  host: string;
  port: number;
  /**
   * Temporal's frontend as every role reaches it (server.yaml's temporal section, read by temporalCredentials):
   * its address, TLS with this control plane's client certificate, and the API key the door sends on every call
   */
  upstream: TemporalCredentials;
  /** the namespace nodes may work in */
  namespace: string;
  /** the control plane's CA, server certificate and key (the door's certificate needs a SAN for every host nodes dial) */
  tls: { caPem: string; certPem: string; keyPem: string };
  /** the control plane's gate: one verdict per connection, and revoked connections cut within a refresh */
  gate: CertificateGate;
  log: (msg: string, fields: Record<string, unknown>) => void;
  tokens?: TaskTokenMemory;
  /** the largest request a node may send, bytes (default 16 MiB) */
  maxRequestBytes?: number;
}

export interface TemporalDoor {
  /** host:port nodes connect to */
  address: string;
  port: number;
  tokens: TaskTokenMemory;
  /** calls let through and refused so far, and streams open now */
  stats(): { passed: number; refused: number; open: number };
  /** When a node's certificate last made a call through this door (ms since the epoch), for node liveness. */
  lastCall(nodeId: string): number | undefined;
  close(): Promise<void>;
}

/**
 * How much sooner than its node Temporal is told a node's activity poll ends. Temporal counts a task started the
 * moment it answers a poll with it, and may hold a poll until a second before the deadline it was given (one was
 * seen open 70 s, the node's whole deadline, at 500 nodes): a task answered then reaches the node after its own
 * deadline (the door's hop, a starved node or door), the node's client drops it, and the task waits out its heartbeat
 * timeout (a shard: 150 s) while the door saw nothing wrong. With the margin, polls answered with a task arrived at
 * most 64.2 s after the node sent them (1,905 of them past 30 s in one 500-node deploy). A 70 s poll becomes 65 s.
 */
export const POLL_MARGIN_MS = 5000;

const VERDICT = Symbol('llmgw.door.verdict');
type Judged = TLSSocket & { [VERDICT]?: Promise<PeerVerdict> };
const { NGHTTP2_CANCEL, HTTP2_FLAG_END_STREAM } = {
  NGHTTP2_CANCEL: http2.constants.NGHTTP2_CANCEL,
  HTTP2_FLAG_END_STREAM: 0x1,
};
// Hop-by-hop headers HTTP/2 forbids or Node sets itself.
const DROP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'host',
  'http2-settings',
]);

function passHeaders(h: IncomingHttpHeaders, keep: readonly string[] = []): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(h))
    if (v !== undefined && (keep.includes(k) || (!k.startsWith(':') && !DROP.has(k)))) out[k] = v;
  return out;
}

/** Answers a call with a status and no message (a trailers-only response), unless the stream is already gone. */
function answer(stream: ServerHttp2Stream, code: number, message: string): void {
  if (stream.destroyed || stream.headersSent) return;
  stream.respond(
    {
      ':status': 200,
      'content-type': 'application/grpc',
      'grpc-status': String(code),
      'grpc-message': encodeGrpcMessage(message),
    },
    { endStream: true },
  );
}

/** Reads a whole request body, or null when the caller went away or it is larger than `max`. */
function readBody(stream: ServerHttp2Stream, max: number): Promise<Buffer | 'too-large' | null> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    stream.on('data', (b: Buffer) => {
      size += b.length;
      if (size > max) {
        resolve('too-large');
        stream.removeAllListeners('data');
        stream.resume();
      } else chunks.push(b);
    });
    stream.once('end', () => resolve(Buffer.concat(chunks)));
    stream.once('close', () => resolve(null));
  });
}

/**
 * The door's address as a node should dial it: the host the node reached the control plane at (so the name its
 * server certificate was checked against) when the door listens there too or on every address; else the door's own host.
 */
export function doorAddressFor(
  listeners: { controlPlane: { host: string }; temporalDoor: { host: string; port: number } },
  requestHost: string,
): string {
  const { host, port } = listeners.temporalDoor;
  const via = host === listeners.controlPlane.host || host === '0.0.0.0' || host === '::' ? requestHost : host;
  return `${via.includes(':') && !via.startsWith('[') ? `[${via}]` : via}:${port}`;
}

/** Starts the door on host:port; resolves once it listens. */
export async function startTemporalDoor(o: TemporalDoorOptions): Promise<TemporalDoor> {
  const tokens = o.tokens ?? new TaskTokenMemory();
  const maxRequest = o.maxRequestBytes ?? 16 * 1024 * 1024;
  const counts = { passed: 0, refused: 0, open: 0 };
  // A node's worker calls through here every second while it runs shards (their heartbeats): evidence it lives.
  const lastCalls = new Map<string, number>();
  const sessions = new Set<ServerHttp2Session>();
  let upstreamSession: ClientHttp2Session | null = null;
  let lastUpstreamLog = 0;
  const upstreamAddress = o.upstream.address;
  const hostPort = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(upstreamAddress);
  if (!hostPort) throw new Error(`the Temporal door's upstream ${JSON.stringify(upstreamAddress)} is not host:port`);
  const upHost = (hostPort[1] as string).replace(/^\[|\]$/g, '');
  const upPort = Number(hostPort[2]);
  const upTls = temporalTlsConnectOptions(o.upstream);
  // The door calls Temporal as the control plane: with its API key, and never with one a node sent.
  const upAuthorization = o.upstream.apiKey === null ? null : `Bearer ${o.upstream.apiKey}`;

  /** One shared HTTP/2 connection to Temporal, made again after Temporal closes it (a restart, a GOAWAY). */
  const upstream = (): ClientHttp2Session => {
    if (upstreamSession && !upstreamSession.closed && !upstreamSession.destroyed) return upstreamSession;
    const s = http2.connect(`${upTls ? 'https' : 'http'}://${upstreamAddress}`, {
      createConnection: () => {
        if (!upTls) return connect({ host: upHost, port: upPort, noDelay: true });
        const socket = tlsConnect(upTls);
        socket.setNoDelay(true);
        return socket;
      },
    });
    const drop = (): void => void (upstreamSession === s && (upstreamSession = null));
    s.on('error', (err: Error) => {
      drop();
      // Once per 5 s: a Temporal restart fails every open poll at once.
      if (Date.now() - lastUpstreamLog > 5000)
        o.log('temporal upstream failed', { upstream: upstreamAddress, error: err.message });
      lastUpstreamLog = Date.now();
    });
    s.on('goaway', drop);
    s.on('close', drop);
    upstreamSession = s;
    return s;
  };

  const refuse = (
    stream: ServerHttp2Stream,
    code: number,
    fields: Record<string, unknown> & { reason: string },
    message: string,
  ): void => {
    counts.refused++;
    o.log('temporal call refused', fields);
    answer(stream, code, message);
  };

  /**
   * Passes one call to Temporal and its answer back. `body` null: stream the request as it comes (operators).
   * For an activity poll, the answer is read whole first and its task token remembered for `cn`, before the node
   * can use it; after a successful completion the token is forgotten.
   */
  const forward = (
    stream: ServerHttp2Stream,
    headers: IncomingHttpHeaders,
    body: Buffer | null,
    cn: string,
    after: Extract<NodeCallVerdict, { kind: 'allow' }>['after'],
  ): void => {
    counts.passed++;
    let up: ClientHttp2Stream;
    const { authorization: _fromCaller, ...callHeaders } = passHeaders(headers);
    const reqHeaders = {
      ...callHeaders,
      ...(upAuthorization ? { authorization: upAuthorization } : {}),
      ':method': 'POST',
      ':path': headers[':path'],
      ':scheme': upTls ? 'https' : 'http',
      ':authority': upstreamAddress,
    };
    try {
      up = upstream().request(reqHeaders);
    } catch {
      // The shared session was closing (GOAWAY) between the check and the request: once more on a new one.
      upstreamSession = null;
      try {
        up = upstream().request(reqHeaders);
      } catch (err) {
        return answer(
          stream,
          GRPC.UNAVAILABLE,
          `Temporal at ${upstreamAddress} is not reachable from the door: ${(err as Error).message}`,
        );
      }
    }
    counts.open++;
    let done = false;
    let trailers: OutgoingHttpHeaders | null = null;
    const settled = (status: string | string[] | undefined): void => {
      if (typeof after === 'object' && (status === '0' || status === '5')) tokens.forget(cn, after.forget); // 5: NOT_FOUND, the task is gone
    };
    const fail = (why: string): void => {
      if (done) return;
      done = true;
      if (!stream.headersSent) return answer(stream, GRPC.UNAVAILABLE, `Temporal at ${upstreamAddress}: ${why}`);
      trailers = {
        'grpc-status': String(GRPC.UNAVAILABLE),
        'grpc-message': encodeGrpcMessage(`Temporal at ${upstreamAddress}: ${why}`),
      };
      if (!stream.writableEnded) stream.end();
    };
    up.on('error', (err: Error) => fail(err.message));
    up.once('close', () => {
      counts.open--;
      if (!done) fail(`the call ended without an answer (HTTP/2 code ${up.rstCode ?? 'none'})`);
    });
    stream.on('error', () => undefined);
    // The node went away (cancelled, disconnected, revoked): its call upstream goes too.
    stream.once('close', () => {
      if (!up.closed) up.close(NGHTTP2_CANCEL);
    });
    stream.once('wantTrailers', () =>
      stream.sendTrailers(
        trailers ?? { 'grpc-status': String(GRPC.INTERNAL), 'grpc-message': 'the Temporal answer carried no status' },
      ),
    );
    up.on('trailers', (t: IncomingHttpHeaders) => {
      trailers = passHeaders(t);
      settled(t['grpc-status']);
    });
    up.once('response', (h: IncomingHttpHeaders, flags: number) => {
      if (stream.destroyed) return;
      if (flags & HTTP2_FLAG_END_STREAM) {
        done = true;
        settled(h['grpc-status']);
        return stream.respond(passHeaders(h, [':status']), { endStream: true });
      }
      stream.respond(passHeaders(h, [':status']), { waitForTrailers: true });
      if (after !== 'record-tokens') {
        up.pipe(stream);
        up.once('end', () => void (done = true));
        return;
      }
      const chunks: Buffer[] = [];
      up.on('data', (b: Buffer) => chunks.push(b));
      up.once('end', () => {
        // The whole answer is here (Temporal's stream may close now); the node gets it once its token is remembered.
        done = true;
        const answerBody = Buffer.concat(chunks);
        void rememberTokens(answerBody, h['grpc-encoding'] as string | undefined, cn).finally(() => {
          if (!stream.destroyed) stream.end(answerBody);
        });
      });
    });
    if (body) up.end(body);
    else stream.pipe(up);
  };

  const rememberTokens = async (body: Buffer, encoding: string | undefined, cn: string): Promise<void> => {
    try {
      for (const frame of parseFrames(body)) {
        const token = pollResponseToken(await messageBytes(frame, encoding));
        if (token) tokens.remember(cn, token);
      }
    } catch (err) {
      o.log('temporal poll answer unreadable', { cn, error: (err as Error).message });
    }
  };

  const handle = async (stream: ServerHttp2Stream, headers: IncomingHttpHeaders): Promise<void> => {
    const arrived = Date.now();
    stream.on('error', () => undefined);
    const call = grpcMethod(headers[':path']);
    const socket = stream.session?.socket as Judged | undefined;
    const verdict = await socket?.[VERDICT];
    if (!verdict) return answer(stream, GRPC.INTERNAL, 'the door lost this connection');
    const method = call
      ? `${call.service === WORKFLOW_SERVICE ? '' : `${call.service}/`}${call.method}`
      : String(headers[':path']);
    if (verdict.kind === 'refused') {
      const code =
        verdict.why === 'revoked' || verdict.why === 'unrecorded' ? GRPC.PERMISSION_DENIED : GRPC.UNAUTHENTICATED;
      return refuse(
        stream,
        code,
        { cn: verdict.cn, serial: verdict.serial, method, reason: verdict.why, detail: verdict.detail },
        `LLMGW_CERT_REFUSED: client certificate refused (${verdict.why}): ${verdict.detail}`,
      );
    }
    if (!call)
      return refuse(
        stream,
        GRPC.UNIMPLEMENTED,
        { cn: verdict.cn, method, reason: 'not a gRPC path' },
        `LLMGW_TEMPORAL_CALL_REFUSED: ${method} is not a gRPC call`,
      );
    if (verdict.role === 'operator') return forward(stream, headers, null, verdict.cn, 'nothing');
    if (verdict.role !== 'node') {
      const reason = `a ${verdict.role} certificate (CN ${verdict.cn}) is neither a node's nor an operator's`;
      return refuse(
        stream,
        GRPC.PERMISSION_DENIED,
        { cn: verdict.cn, role: verdict.role, method, reason },
        `LLMGW_TEMPORAL_CALL_REFUSED: ${method}: ${reason}`,
      );
    }
    const body = await readBody(stream, maxRequest);
    if (body === null) return;
    const cn = verdict.cn;
    lastCalls.set(cn, Date.now());
    if (body === 'too-large') {
      const reason = `request larger than ${maxRequest} bytes`;
      return refuse(
        stream,
        GRPC.RESOURCE_EXHAUSTED,
        { cn, method, reason },
        `LLMGW_TEMPORAL_CALL_REFUSED: ${method}: ${reason}`,
      );
    }
    // An allowed call carries its request as read, uncompressed.
    let judged:
      | Extract<NodeCallVerdict, { kind: 'refuse' }>
      | (Extract<NodeCallVerdict, { kind: 'allow' }> & { request: Buffer });
    try {
      const frames = parseFrames(body);
      if (frames.length !== 1) throw new Error(`${frames.length} messages where a unary call has one`);
      const request = await messageBytes(
        frames[0] as (typeof frames)[0],
        headers['grpc-encoding'] as string | undefined,
      );
      // A token this process does not hold may have been handed out before a restart, or by another control plane.
      const token = call.service === WORKFLOW_SERVICE ? answerToken(call.method, request) : null;
      if (token) await tokens.recall(cn, token);
      const verdict = judgeNodeCall({
        cn,
        namespace: o.namespace,
        service: call.service,
        method: call.method,
        request,
        tokens,
      });
      judged = verdict.kind === 'allow' ? { ...verdict, request } : verdict;
    } catch (err) {
      judged = {
        kind: 'refuse',
        code: GRPC.INVALID_ARGUMENT,
        reason: `the request does not read as ${call.method}: ${(err as Error).message}`,
      };
    }
    if (judged.kind === 'refuse')
      return refuse(
        stream,
        judged.code,
        { cn, method, reason: judged.reason },
        `LLMGW_TEMPORAL_CALL_REFUSED: ${method} refused for node ${cn}: ${judged.reason}`,
      );
    // Passed on as the door read it, uncompressed: Temporal answers in the request's encoding, so it neither
    // gunzips this call nor gzips its answer, and the door reads a poll's answer without a gunzip either. At 200
    // nodes this measured the same as passing the gzip on (docs/architecture.md, Scale): the simpler path, kept.
    const { 'grpc-encoding': _encoding, ...plain } = headers;
    if (judged.after === 'record-tokens') {
      // A poll reaches Temporal with its node's deadline less the time it spent here and POLL_MARGIN_MS, so any
      // answer — a task above all — gets back before the node gives up on the poll (see POLL_MARGIN_MS).
      const asked = grpcTimeoutMs(headers['grpc-timeout']);
      if (asked !== null) plain['grpc-timeout'] = grpcTimeoutHeader(asked - (Date.now() - arrived) - POLL_MARGIN_MS);
    }
    forward(stream, plain, frameMessage(judged.request), cn, judged.after);
  };

  const server = http2.createSecureServer({ ...mtlsServerOptions(o.tls), allowHTTP1: false });
  // Every TCP connection from its first byte: close() drops what is left after its grace, stalled handshakes included.
  const connections = trackConnections(server);
  // Before http2's own listener: every stream of the connection then finds the verdict on its socket.
  server.prependListener('secureConnection', (socket: Judged) => {
    socket.setNoDelay(true);
    socket[VERDICT] = o.gate.verify(socket);
  });
  server.on('session', (s: ServerHttp2Session) => {
    sessions.add(s);
    s.on('error', () => undefined);
    s.once('close', () => sessions.delete(s));
  });
  server.on(
    'stream',
    (stream, headers) =>
      void handle(stream, headers).catch((err: Error) => {
        o.log('temporal door error', { error: err.message, path: headers[':path'] });
        answer(stream, GRPC.INTERNAL, `the door failed: ${err.message}`);
      }),
  );
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  return {
    address: `${o.host.includes(':') ? `[${o.host}]` : o.host}:${port}`,
    port,
    tokens,
    stats: () => ({ ...counts }),
    lastCall: (nodeId) => lastCalls.get(nodeId),
    async close(): Promise<void> {
      // No grace: every session is destroyed now; what is left is handshakes, which have sent no call.
      await connections.closeWithin(0, async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        for (const s of sessions) s.destroy();
        upstreamSession?.destroy();
        await closed;
      });
    },
  };
}
