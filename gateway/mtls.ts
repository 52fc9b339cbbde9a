/**
 * Mutual TLS at the control plane. The TLS layer asks for a client certificate but lets every handshake
 * through (`rejectUnauthorized: false`), and this gate decides per connection — so a refusal is an HTTP
 * answer and one log line that says which of missing / unknown CA / expired / revoked / unrecorded it was,
 * rather than a hang-up nobody can diagnose. It also closes open keep-alive connections whose certificate
 * is revoked, within one refresh.
 */
import type { TLSSocket } from 'node:tls';
import { X509Certificate } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { openAiError, quoteInput } from '../lib/errors';
import { certificateInfo, type CertificateInfo } from '../lib/pki';
import { TLS_HANDSHAKE_MS } from '../lib/connections';

export type CertRole = 'node' | 'server' | 'operator' | 'gateway';

export type PeerVerdict =
  | { kind: 'ok'; cn: string; serial: string; role: CertRole; notAfter: Date }
  | {
      kind: 'refused';
      why: 'no-certificate' | 'unknown-ca' | 'expired' | 'not-yet-valid' | 'revoked' | 'unrecorded';
      cn: string | null;
      serial: string | null;
      detail: string;
    };

/** What the gate needs from the certificates table. */
export interface CertificateLookup {
  /** The recorded certificate of this serial, or null when this cluster never issued it. */
  bySerial(serial: string): Promise<{ cn: string; role: CertRole; revokedAt: Date | null } | null>;
  /** Serials revoked so far. */
  revokedSerials(): Promise<string[]>;
}

export interface GateOptions {
  caPem: string;
  lookup: CertificateLookup;
  log: (msg: string, fields: Record<string, unknown>) => void;
  /** How often the revoked set is re-read (and revoked connections closed), ms. */
  refreshMs?: number;
  now?: () => Date;
}

/** Options for `https.createServer` / fastify's `https`: ask for a client certificate, judge it in the gate; a stalled handshake is cut. */
export function mtlsServerOptions(o: { caPem: string; certPem: string; keyPem: string }): {
  ca: string;
  cert: string;
  key: string;
  requestCert: true;
  rejectUnauthorized: false;
  handshakeTimeout: number;
} {
  return {
    ca: o.caPem,
    cert: o.certPem,
    key: o.keyPem,
    requestCert: true,
    rejectUnauthorized: false,
    handshakeTimeout: TLS_HANDSHAKE_MS,
  };
}

/**
 * The checks of a connection's client certificate that need no table: one was presented, this CA issued it, and
 * it is within its dates. Every mTLS listener judges these first (the control plane's gate, a node's door).
 */
export function judgePresented(
  socket: TLSSocket,
  ca: X509Certificate,
  now: Date,
  noCertificate = 'the client sent no certificate: give the agent --cert and --key (issued by llmgw ca issue)',
): { kind: 'ok'; info: CertificateInfo } | Extract<PeerVerdict, { kind: 'refused' }> {
  const peer = typeof socket.getPeerCertificate === 'function' ? socket.getPeerCertificate() : null;
  const refused = (
    why: Extract<PeerVerdict, { kind: 'refused' }>['why'],
    detail: string,
    info?: CertificateInfo,
  ): Extract<PeerVerdict, { kind: 'refused' }> => ({
    kind: 'refused',
    why,
    cn: info?.cn ?? null,
    serial: info?.serial ?? null,
    detail,
  });
  if (!peer || !peer.raw) return refused('no-certificate', noCertificate);
  const info = certificateInfo(peer.raw);
  if (!info.issuerMatches(ca))
    return refused(
      'unknown-ca',
      `issued by "${new X509Certificate(peer.raw).issuer.replace(/\n/g, ', ')}", not this cluster's CA`,
      info,
    );
  if (now > info.notAfter)
    return refused(
      'expired',
      `expired ${info.notAfter.toISOString()}: issue a new one (llmgw ca issue --node ${info.cn ?? 'ID'})`,
      info,
    );
  if (now < info.notBefore)
    return refused('not-yet-valid', `valid only from ${info.notBefore.toISOString()}: check the clocks`, info);
  return { kind: 'ok', info };
}

/** Judges each connection's client certificate once, and cuts connections whose certificate gets revoked. */
export class CertificateGate {
  private readonly ca: X509Certificate;
  private readonly verdicts = new WeakMap<TLSSocket, Promise<PeerVerdict>>();
  private readonly open = new Map<TLSSocket, { serial: string; notAfter: Date }>();
  private revoked = new Set<string>();
  private timer: NodeJS.Timeout | null = null;
  private readonly now: () => Date;

  constructor(private readonly o: GateOptions) {
    this.ca = new X509Certificate(o.caPem);
    this.now = o.now ?? (() => new Date());
  }

  /** Loads the revoked set and starts refreshing it. */
  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(
      () => void this.refresh().catch((err: Error) => this.o.log('revocation refresh failed', { error: err.message })),
      this.o.refreshMs ?? 1000,
    );
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** Re-reads the revoked serials and destroys open connections whose certificate is revoked or has expired. */
  async refresh(): Promise<void> {
    this.revoked = new Set((await this.o.lookup.revokedSerials()).map((s) => s.toLowerCase()));
    const now = this.now();
    for (const [socket, { serial, notAfter }] of this.open) {
      const why = this.revoked.has(serial) ? 'revoked' : now > notAfter ? 'expired' : null;
      if (!why) continue;
      this.o.log('certificate refused', { reason: why, serial, detail: `${why} while connected: connection closed` });
      this.open.delete(socket);
      socket.destroy();
    }
  }

  /** The verdict for this connection's client certificate (judged once per connection). */
  verify(socket: TLSSocket): Promise<PeerVerdict> {
    let v = this.verdicts.get(socket);
    if (!v) {
      v = this.judge(socket);
      this.verdicts.set(socket, v);
      void v.then((r) => {
        if (r.kind !== 'ok') return;
        this.open.set(socket, { serial: r.serial, notAfter: r.notAfter });
        socket.once('close', () => this.open.delete(socket));
      });
    }
    return v;
  }

  private async judge(socket: TLSSocket): Promise<PeerVerdict> {
    const presented = judgePresented(socket, this.ca, this.now());
    if (presented.kind === 'refused') return presented;
    const { info } = presented;
    const refused = (why: Extract<PeerVerdict, { kind: 'refused' }>['why'], detail: string): PeerVerdict => ({
      kind: 'refused',
      why,
      cn: info.cn,
      serial: info.serial,
      detail,
    });
    if (this.revoked.has(info.serial))
      return refused(
        'revoked',
        'revoked: this certificate can no longer be used; onboard the node again for a new one',
      );
    const rec = await this.o.lookup.bySerial(info.serial);
    if (!rec)
      return refused(
        'unrecorded',
        "signed by this CA but not in this cluster's certificates table (another cluster's certificate?)",
      );
    if (rec.revokedAt)
      return refused(
        'revoked',
        'revoked: this certificate can no longer be used; onboard the node again for a new one',
      );
    return { kind: 'ok', cn: rec.cn, serial: info.serial, role: rec.role, notAfter: info.notAfter };
  }
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The verified client certificate of the connection (set by the mTLS gate). */
    peer?: { cn: string; serial: string; role: CertRole; notAfter: Date };
  }
}

/**
 * Installs the gate on every route but /health and those `open` names: a refused certificate gets 401 (none, unknown CA, expired,
 * not yet valid) or 403 (revoked, unrecorded, wrong role) in OpenAI's error shape, and one log line.
 * `roleFor` says which certificate role a route needs (agent routes: node; the rest: operator). It judges the
 * route the router matched, never the raw URL: `/v1/%61gent/register` is routed as `/v1/agent/register` and must
 * be judged so. A request no route takes needs a valid certificate of any role, and gets the 404.
 */
export function installGate(
  app: FastifyInstance,
  gate: CertificateGate,
  roleFor: (route: string) => CertRole,
  log: GateOptions['log'],
  open: (route: string) => boolean = () => false,
): void {
  app.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
    const route = req.routeOptions.url;
    // /health, and the routes that judge who asks themselves (the cluster page: a session, or this gate's verdict).
    if (route === '/health' || (route !== undefined && open(route))) return;
    const v = await gate.verify(req.raw.socket as TLSSocket);
    if (v.kind === 'refused') {
      log('certificate refused', { reason: v.why, cn: v.cn, serial: v.serial, url: req.url, detail: v.detail });
      const status = v.why === 'revoked' || v.why === 'unrecorded' ? 403 : 401;
      return reply
        .code(status)
        .send(openAiError('LLMGW_CERT_REFUSED', `client certificate refused (${v.why}): ${v.detail}`));
    }
    const need = route === undefined ? v.role : roleFor(route);
    if (v.role !== need) {
      log('certificate refused', {
        reason: 'wrong-role',
        cn: v.cn,
        serial: v.serial,
        url: req.url,
        route,
        role: v.role,
        need,
      });
      return reply
        .code(403)
        .send(
          openAiError(
            'LLMGW_CERT_REFUSED',
            `${v.role === 'operator' ? 'an' : 'a'} ${v.role} certificate (CN ${v.cn}) may not call ${route ?? quoteInput(req.url, 100)}: it needs ${need === 'operator' ? 'an' : 'a'} ${need} certificate`,
          ),
        );
    }
    req.peer = { cn: v.cn, serial: v.serial, role: v.role, notAfter: v.notAfter };
  });
}
