/**
 * HTTPS to the control plane with a client certificate: undici over an undici Agent whose connections present
 * `cert`/`key` and trust only `ca`. The agent, `llmgw ctl` and the tests use it; `use()` swaps the certificate (a
 * renewal) for new connections and closes the old ones once their requests are done.
 */
import { EventEmitter } from 'node:events';
import { Agent, fetch as undiciFetch, request as undiciRequest, type RequestInit as UndiciInit } from 'undici';

/** A client certificate, its key and the CA to trust the server by (PEM). */
export interface TlsCredentials {
  certPem: string;
  keyPem: string;
  caPem: string;
}

/** What callers pass: the subset of fetch's init llmgw uses. */
export interface FetchInit {
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  signal?: AbortSignal;
}

/**
 * What `TlsClient.request` answers: the part of fetch's Response the agent reads (a Response has all of it, so a
 * test's fake may answer one). `body.cancel()` lets go of a body that will not be read.
 */
export interface LightResponse {
  readonly status: number;
  readonly ok: boolean;
  text(): Promise<string>;
  json(): Promise<unknown>;
  readonly body: { cancel(): Promise<void> } | null;
}

function dispatcher(c: TlsCredentials): Agent {
  return new Agent({ connect: { cert: c.certPem, key: c.keyPem, ca: c.caPem } });
}

/** fetch with a client certificate. */
export class TlsClient {
  private agent: Agent;

  constructor(credentials: TlsCredentials) {
    this.agent = dispatcher(credentials);
  }

  /** Like global fetch, over this client's certificate. */
  readonly fetch = async (url: string, init: FetchInit = {}): Promise<Response> =>
    (await undiciFetch(url, { ...init, dispatcher: this.agent } as UndiciInit)) as unknown as Response;

  /**
   * Like `fetch`, on undici's `request`: no WHATWG streams, Headers or Response per call. What the agent's
   * heartbeat, once a second from every node, goes through: 0.2 ms of CPU a call where fetch took 0.6-0.8 ms
   * (docs/architecture.md, Scale). `timeoutMs` bounds the whole exchange, the body's reading included, and rejects
   * with a TimeoutError as `AbortSignal.timeout` would; its timer is cleared when the body is read or let go, where
   * `AbortSignal.timeout` leaves its own to fire and build a DOMException with a stack (3 % of a simulated fleet's
   * CPU).
   */
  readonly request = async (url: string, init: FetchInit & { timeoutMs?: number } = {}): Promise<LightResponse> => {
    let timer: NodeJS.Timeout | undefined;
    let signal: FetchInit['signal'] | EventEmitter | undefined = init.signal;
    if (init.timeoutMs !== undefined) {
      const ms = init.timeoutMs;
      const timeout = new EventEmitter() as EventEmitter & { reason?: Error };
      timer = setTimeout(() => {
        timeout.reason = Object.assign(new Error(`no answer within ${ms} ms`), { name: 'TimeoutError' });
        timeout.emit('abort');
      }, ms).unref();
      signal = timeout;
    }
    const done = <T>(p: Promise<T>): Promise<T> => (timer ? p.finally(() => clearTimeout(timer)) : p);
    let r: Awaited<ReturnType<typeof undiciRequest>>;
    try {
      r = await undiciRequest(url, {
        method: (init.method ?? 'GET') as 'GET',
        ...(init.headers ? { headers: init.headers } : {}),
        ...(init.body !== undefined ? { body: init.body } : {}),
        ...(signal ? { signal } : {}),
        dispatcher: this.agent,
      });
    } catch (err) {
      clearTimeout(timer);
      throw err;
    }
    const status = r.statusCode;
    const body = r.body;
    return {
      status,
      ok: status >= 200 && status < 300,
      text: () => done(body.text()),
      json: () => done(body.json()),
      body: { cancel: () => done(body.dump().then(() => undefined)) },
    };
  };

  /** Presents `credentials` from the next connection on; the old connections close when idle. */
  use(credentials: TlsCredentials): void {
    const old = this.agent;
    this.agent = dispatcher(credentials);
    void old.close().catch(() => undefined);
  }

  /** Closes every connection. */
  async close(): Promise<void> {
    await this.agent.destroy().catch(() => undefined);
  }
}
