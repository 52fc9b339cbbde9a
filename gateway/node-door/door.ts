/**
 * A node's door: the one inference listener of a node (run by `llmgw node-door`, the process the agent starts and
 * adopts, workers/node-door; with --door-in-agent, by the agent itself). Engines bind to loopback; the door takes
 * HTTPS with a client certificate of role gateway from the cluster CA — judged by the same checks as the control
 * plane's gate (../mtls: present, this CA, within its dates), the role read from the certificate itself (the CA
 * signs it into the subject, lib/pki/issue.ts: the node has no MySQL), and revocation asked of the control plane
 * when it can be (`honoured`) — and forwards `/nodes/NODE/replicas/REPLICA/…` to that replica's engine on
 * 127.0.0.1, streaming both ways (nothing is buffered: a request body and an SSE answer flow chunk by chunk).
 * Its server certificate is the node's own (clientAuth only; the gateway checks it itself, lib/pki/peer.ts).
 */
import { X509Certificate } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { createServer, type Server, type TLSSocket } from 'node:tls';
import { trackConnections } from '../../lib/connections';
import { DOOR_MISS_HEADER, ENGINE_API_HOST, parseDoorPath } from '../../lib/node-door';
import { judgePresented, mtlsServerOptions } from '../mtls';
import { Relay, jsonAnswer, type Decision, type Verdict } from './relay';

export interface NodeDoorOptions {
  nodeId: string;
  /** the node's certificate and key (served) and the cluster CA (client certificates are judged by it) */
  tls: { certPem: string; keyPem: string; caPem: string };
  host: string;
  /** 0: any free port */
  port: number;
  /**
   * A listening socket handed over by the door this one replaces (`llmgw node-door --listen-fd 3`): served instead of
   * binding `host:port`, so no connection is refused while the two overlap.
   */
  fd?: number;
  /** The loopback port of rank 0's engine of `replicaId` when it runs on this node, else null. */
  replicaPort: (replicaId: string) => number | null;
  /** The replicas this node runs now (for the 404's message). */
  replicas: () => string[];
  /**
   * The agent's engine signals (replica id -> queue, KV-cache use, age), served at GET /nodes/NODE/signals to
   * gateways, which poll it to weigh their least-outstanding choice. Absent: that path answers 404.
   */
  signals?: () => Record<string, unknown>;
  /**
   * Whether the control plane still honours a certificate (revocation); answers are kept a minute. It throws when
   * the control plane cannot be asked: the door then goes by the CA's signature alone (and logs it), so the
   * engines keep serving through a control plane outage. Absent: signature, dates and role only.
   */
  honoured?: (serial: string) => Promise<boolean>;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
  now?: () => Date;
}

export interface NodeDoor {
  port: number;
  /** The listening socket's file descriptor (handed to a replacing door), or null where the platform has none. */
  listeningFd(): number | null;
  /** Requests being answered now. */
  inFlight(): number;
  /** Serves with a renewed certificate from the next connection on. */
  useCredentials(tls: NodeDoorOptions['tls']): void;
  /**
   * Stops accepting, answers what is in flight (each with `Connection: close`), closes idle connections and
   * resolves once nothing is left or `graceMs` has passed (what is still open then is dropped).
   */
  drain(graceMs: number): Promise<void>;
  close(): Promise<void>;
}

const HONOURED_CACHE_MS = 60_000;
const NO_CERT =
  "the client sent no certificate: a node's door takes only a gateway certificate (llmgw ca issue --gateway NAME, server.yaml tls.gatewayCert)";
/** Starts a node's door; see the module comment. */
export async function startNodeDoor(o: NodeDoorOptions): Promise<NodeDoor> {
  const log = o.log ?? ((): void => undefined);
  const now = o.now ?? ((): Date => new Date());
  let ca = new X509Certificate(o.tls.caPem);
  const honouredCache = new Map<string, { ok: boolean; at: number }>();
  let unaskable = false;

  const isHonoured = async (serial: string): Promise<boolean> => {
    if (!o.honoured) return true;
    const hit = honouredCache.get(serial);
    if (hit && Date.now() - hit.at < HONOURED_CACHE_MS) return hit.ok;
    try {
      const ok = await o.honoured(serial);
      honouredCache.set(serial, { ok, at: Date.now() });
      if (unaskable) log('node door: the control plane answers again; revocation is checked', {});
      unaskable = false;
      return ok;
    } catch (err) {
      if (!unaskable)
        log("node door: cannot ask the control plane whether a certificate is revoked; going by the CA's signature", {
          level: 'warn',
          error: (err as Error).message,
        });
      unaskable = true;
      return hit?.ok ?? true;
    }
  };

  const judge = async (socket: TLSSocket): Promise<Verdict> => {
    const p = judgePresented(socket, ca, now(), NO_CERT);
    if (p.kind === 'refused')
      return { ok: false, status: 401, why: p.why, message: `client certificate refused (${p.why}): ${p.detail}` };
    const { cn, serial, role } = p.info;
    if (role !== 'gateway')
      return {
        ok: false,
        status: 403,
        why: 'wrong-role',
        message: `${role === null ? 'a certificate without a role' : `a ${role} certificate`} (CN ${cn ?? '?'}) may not call a node's door: it takes only a gateway certificate (llmgw ca issue --gateway NAME)`,
      };
    if (!(await isHonoured(serial)))
      return {
        ok: false,
        status: 403,
        why: 'revoked',
        message: `client certificate refused (revoked): ${serial} (CN ${cn ?? '?'}) is not honoured by the control plane; issue a new gateway certificate`,
      };
    return { ok: true, cn: cn ?? '?' };
  };

  const signalsPath = `/nodes/${encodeURIComponent(o.nodeId)}/signals`;
  const decide = (method: string, url: string): Decision => {
    if (o.signals && method === 'GET' && url === signalsPath) {
      // The door's own answer, not an engine's: the last signal of every engine here, read by the agent.
      return { kind: 'answer', status: 200, body: JSON.stringify({ node: o.nodeId, replicas: o.signals() }) };
    }
    const path = parseDoorPath(url);
    if (!path)
      return jsonAnswer(
        'LLMGW_NOT_FOUND',
        404,
        `a node's door serves /nodes/${o.nodeId}/replicas/<replica>/… only, not ${JSON.stringify(url.slice(0, 100))}`,
      );
    const port = path.node === o.nodeId ? o.replicaPort(path.replica) : null;
    if (port === null) {
      const here = o.replicas();
      const what =
        path.node !== o.nodeId
          ? `this is node ${o.nodeId}'s door, not ${path.node}'s`
          : `node ${o.nodeId} does not run replica ${path.replica}`;
      return jsonAnswer(
        'LLMGW_REPLICA_NOT_HERE',
        404,
        `${what} (it runs ${here.length ? here.join(', ') : 'no replica'} now): the route is stale`,
        { [DOOR_MISS_HEADER]: '1' },
      );
    }
    return { kind: 'forward', port, path: path.rest, replica: path.replica };
  };

  // Requests are relayed as bytes (relay.ts); while draining (a replacing door took over the listening socket),
  // every answer closes its connection after it, so a gateway's pool opens its next one to the new door instead of
  // finding this one gone.
  const relay = new Relay(
    {
      judge,
      refused: (v, url) => {
        log('certificate refused', { reason: v.why, url, detail: v.message });
        return jsonAnswer('LLMGW_CERT_REFUSED', v.status, v.message);
      },
      decide,
      failed: (to, error) => {
        log('node door: the engine did not answer', { replica: to.replica, port: to.port, error });
        return jsonAnswer(
          'LLMGW_UPSTREAM_FAILED',
          502,
          `replica ${to.replica}'s engine on ${o.nodeId} (${ENGINE_API_HOST}:${to.port}): ${error}`,
        );
      },
      internal: (err) => jsonAnswer('LLMGW_INTERNAL', 500, `node door: ${err.message}`),
    },
    ENGINE_API_HOST,
  );

  const server: Server = createServer(
    mtlsServerOptions({ caPem: o.tls.caPem, certPem: o.tls.certPem, keyPem: o.tls.keyPem }),
    (socket: TLSSocket) => relay.accept(socket),
  );
  server.on('tlsClientError', (err) => log('node door refused a TLS client', { error: err.message }));
  const connections = trackConnections(server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    if (o.fd !== undefined) server.listen({ fd: o.fd }, () => resolve());
    else server.listen(o.port, o.host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    listeningFd: () => {
      // Node keeps the descriptor on the listener's handle (not a public API; present on POSIX).
      const fd = (server as unknown as { _handle?: { fd?: number } })._handle?.fd;
      return typeof fd === 'number' && fd >= 0 ? fd : null;
    },
    inFlight: () => relay.active,
    drain: async (graceMs) => {
      relay.drain();
      server.close();
      const deadline = Date.now() + graceMs;
      while (relay.active > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      connections.dropAfter(0);
      relay.destroy();
    },
    useCredentials: (tls) => {
      ca = new X509Certificate(tls.caPem);
      server.setSecureContext({ cert: tls.certPem, key: tls.keyPem, ca: tls.caPem });
    },
    close: () =>
      connections.closeWithin(
        0,
        () =>
          new Promise<void>((resolve) => {
            server.close(() => resolve());
            relay.destroy();
          }),
      ),
  };
}
