/**
 * The agent's control planes: one or more `--server` URLs over one MySQL and one Temporal, reached over the node's
 * mTLS client. The agent talks to one of them, the current one, and moves to the next (in the order given) when the
 * current one does not answer or answers 5xx, then sticks to the one that answered: a control plane that comes back
 * gets no traffic until the one in use fails in turn. Each move is logged once.
 */
import { TlsClient, type FetchInit, type LightResponse, type TlsCredentials } from '../../lib/tls-client';

/**
 * The node's mTLS client to its control planes. Two connections per control plane at most, however slow it gets:
 * a call that outlives its 5 s wait is given up on but not aborted, so its connection stays (TlsClient.request),
 * and the next call takes the other connection or waits for one, where an abort would have closed the connection
 * and the next call opened another, a TLS handshake each on a control plane already behind. Two, so a heartbeat is
 * not queued behind one slow call. A control plane that never answers has the connection closed after 30 s.
 */
export function controlClient(tls: TlsCredentials): TlsClient {
  return new TlsClient(tls, { connections: 2, closeAfterMs: 30_000 });
}

/** What the control planes are reached with: the node's mTLS client (controlClient) or a test's fake. */
export type ControlClient = Pick<TlsClient, 'request' | 'use' | 'close'>;

/** The control planes and how to reach them. */
export interface ControlPlanesOptions {
  /** Base URLs (`https://host:port`), the first preferred at start. */
  servers: readonly string[];
  client: ControlClient;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
  /** How long one control plane may take to answer before the next is asked, ms (default 5 s). */
  timeoutMs?: number;
}

/** Why an attempt at one control plane counts as that control plane failing. */
type Failed = { server: string; res: LightResponse; why: string } | { server: string; err: Error; why: string };

/** fetch failing says "fetch failed" and the cause says what (ECONNREFUSED, a closed socket, a timeout); undici's
 * request throws the cause itself. */
function describe(err: Error): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return cause ? `${err.message}: ${cause.code ?? cause.message ?? String(cause)}` : err.message;
}

/** How a part of the agent reaches its control planes: a path of the agent API, with failover behind it. */
export type ControlFetch = Pick<ControlPlanes, 'fetch'>;

/** Several control planes behind one fetch that fails over between them. */
export class ControlPlanes {
  private readonly servers: string[];
  private at = 0;

  constructor(private readonly o: ControlPlanesOptions) {
    if (o.servers.length === 0) throw new Error('ControlPlanes needs at least one server URL');
    this.servers = o.servers.map((s) => s.replace(/\/$/, ''));
  }

  /** The base URL of the control plane in use now. */
  get current(): string {
    return this.servers[this.at] as string;
  }

  /**
   * `fetch(current + path)`; when that fails (no answer within the timeout, a connection error, a 5xx), the next
   * control plane is asked, and so on once round. The first that answers below 500 becomes the current one. When
   * none does, the current one stays, and its answer (or error) is returned (thrown).
   */
  async fetch(path: string, init: Omit<FetchInit, 'signal'> = {}): Promise<LightResponse> {
    const start = this.at;
    let first: Failed | undefined;
    for (let i = 0; i < this.servers.length; i++) {
      const at = (start + i) % this.servers.length;
      const server = this.servers[at] as string;
      let failed: Failed;
      try {
        const res = await this.o.client.request(`${server}${path}`, {
          ...init,
          timeoutMs: this.o.timeoutMs ?? 5000,
        });
        if (res.status < 500) {
          if (first && 'res' in first) void first.res.body?.cancel().catch(() => undefined);
          this.settle(at, first);
          return res;
        }
        failed = { server, res, why: `HTTP ${res.status}` };
      } catch (err) {
        failed = { server, err: err as Error, why: describe(err as Error) };
      }
      if (first) {
        if ('res' in failed) void failed.res.body?.cancel().catch(() => undefined);
      } else first = failed;
    }
    // Every control plane failed: the current one stays, and the caller sees what it answered.
    const f = first as Failed;
    if ('res' in f) return f.res;
    throw f.err;
  }

  /** Presents `credentials` (a renewed certificate) from the next connection on, to every control plane. */
  use(credentials: TlsCredentials): void {
    this.o.client.use(credentials);
  }

  /** Closes every connection. */
  close(): Promise<void> {
    return this.o.client.close();
  }

  /** Makes `at` the current control plane; a move is logged once (concurrent calls that fail over together log one). */
  private settle(at: number, left: Failed | undefined): void {
    if (at === this.at) return;
    const from = this.current;
    this.at = at;
    this.o.log?.('control plane failover: this agent now talks to another control plane', {
      level: 'warn',
      from,
      to: this.current,
      why: left?.server === from ? left.why : 'the control plane in use failed',
    });
  }
}
