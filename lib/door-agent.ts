/**
 * The gateway's side of the nodes' doors: one keep-alive pool of TLS connections, presenting the gateway's
 * certificate (server.yaml tls.gatewayCert, role gateway) and accepting only the door of the node a route names.
 * A door serves with its node's own certificate, which is clientAuth only (OpenSSL would refuse it as a server's),
 * so the check is done here (lib/pki/peer.ts: this cluster's CA, within its dates, CN = the node id, role node)
 * before the connection is handed to a request: no byte of a prompt goes to a door that is not the node's.
 */
import { existsSync, readFileSync } from 'node:fs';
import { Agent, get, type AgentOptions } from 'node:https';
import type { Duplex } from 'node:stream';
import { connect, type ConnectionOptions, type TLSSocket } from 'node:tls';
import type { DoorEndpoint } from './node-door';
import { nodePeerProblem } from './pki';

/** What a door connection presents and trusts. */
export interface DoorCredentials {
  certPem: string;
  keyPem: string;
  caPem: string;
}

/** The error a connection to a door fails with when it is not the named node's (an ejection, like a refusal). */
export const DOOR_CERT_REFUSED = 'LLMGW_DOOR_CERT_REFUSED';
/** The error a connection to a door fails with when it is not open within `connectMs`. */
export const DOOR_CONNECT_TIMEOUT = 'ETIMEDOUT';

/**
 * A keep-alive agent for the nodes' doors. A request names the node it expects as its `servername`
 * (RoutableReplica.node); a new connection is handed over only once the door's certificate is that node's.
 */
export class DoorAgent extends Agent {
  constructor(
    private readonly creds: DoorCredentials,
    private readonly connectMs: number,
    o: AgentOptions = {},
  ) {
    // No session cache: a resumed session would skip nothing we need, and connections are long-lived anyway.
    super({ keepAlive: true, maxCachedSessions: 0, ...o });
  }

  /** Another pool with the same certificate and checks (e.g. one kept-alive connection per door for engine signals). */
  sibling(o: AgentOptions = {}): DoorAgent {
    return new DoorAgent(this.creds, this.connectMs, o);
  }

  /** Opens, verifies, then hands the socket to `cb` (Node's Agent waits for the callback). */
  override createConnection(options: ConnectionOptions, cb: (err: Error | null, socket?: Duplex) => void): undefined {
    connectDoor(this.creds, this.connectMs, options, cb);
    return undefined;
  }

  /**
   * The same connections for another client (the gateway's upstream dispatcher, undici): opened to `hostname:port`,
   * handed over once the door's certificate is `servername`'s.
   */
  connector(): (o: { hostname: string; port: string; servername?: string | null }, cb: DoorConnectCallback) => void {
    // Through createConnection, the one way a door connection is opened (a test counts them there).
    return (o, cb) =>
      void this.createConnection(
        { host: o.hostname, port: Number(o.port), servername: o.servername ?? '' },
        (err, s) => (err ? cb(err, null) : cb(null, s as TLSSocket)),
      );
  }
}

/** What a connector calls back with: an error, or the verified socket. */
export type DoorConnectCallback = (...a: [null, TLSSocket] | [Error, null]) => void;

/**
 * Opens a TLS connection to a node's door with the gateway certificate, and hands it to `cb` only once the door's
 * certificate is the node's that `options.servername` names, within `connectMs`.
 */
function connectDoor(
  creds: DoorCredentials,
  connectMs: number,
  options: ConnectionOptions,
  cb: (err: Error | null, socket?: Duplex) => void,
): void {
  const expectCn = options.servername ?? '';
  const s = connect({
    ...options,
    cert: creds.certPem,
    key: creds.keyPem,
    ca: creds.caPem,
    rejectUnauthorized: false,
  });
  s.setNoDelay(true);
  let done = false;
  const finish = (err: Error | null): void => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    if (err) {
      s.destroy();
      cb(err);
    } else cb(null, s);
  };
  const timer = setTimeout(
    () =>
      finish(
        Object.assign(new Error(`no connection to the node door within ${connectMs} ms`), {
          code: DOOR_CONNECT_TIMEOUT,
        }),
      ),
    connectMs,
  );
  s.once('error', finish);
  s.once('secureConnect', () => {
    const problem = nodePeerProblem(s, { caPem: creds.caPem, expectCn });
    finish(
      problem
        ? Object.assign(new Error(`node door certificate refused: ${problem}`), { code: DOOR_CERT_REFUSED })
        : null,
    );
  });
}

/** The gateway certificate's door pool from server.yaml tls (gatewayCert, gatewayKey, ca), or null when the files are missing. */
export function doorAgentFromFiles(
  tls: { ca: string; gatewayCert: string; gatewayKey: string },
  connectMs: number,
  o: AgentOptions = {},
): DoorAgent | null {
  if (!existsSync(tls.gatewayCert) || !existsSync(tls.gatewayKey)) return null;
  const creds = {
    certPem: readFileSync(tls.gatewayCert, 'utf8'),
    keyPem: readFileSync(tls.gatewayKey, 'utf8'),
    caPem: readFileSync(tls.ca, 'utf8'),
  };
  return new DoorAgent(creds, connectMs, o);
}

/** GETs `path` (e.g. `/health`) of a replica behind a node's door: its status and body (rejects on no answer). */
export function doorGet(
  agent: DoorAgent,
  door: DoorEndpoint,
  path: string,
  timeoutMs: number,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = get(
      {
        agent,
        host: door.host,
        port: door.port,
        servername: door.node,
        path: `${door.base}${path}`,
        timeout: timeoutMs,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.once('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.once('error', reject);
      },
    );
    req.once('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.once('error', reject);
  });
}
