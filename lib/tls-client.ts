/**
 * HTTPS to the control plane with a client certificate: undici over an undici Agent whose connections present
 * `cert`/`key` and trust only `ca`. The agent, `llmgw ctl` and the tests use it; `use()` swaps the certificate (a
 * renewal) for new connections and closes the old ones once their requests are done.
 */
import { createSecureContext } from 'node:tls';
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

/** How a TlsClient's connections are pooled and bounded. */
export interface TlsClientOptions {
  /** Connections per origin at most (default: as many as requests need). */
  connections?: number;
  /**
   * How long a request may wait for its answer's headers, and then between its body's chunks, before its
   * connection is closed, ms (default undici's, 300 s). `request`'s `timeoutMs` gives up waiting sooner without
   * closing anything.
   */
  closeAfterMs?: number;
}

function dispatcher(c: TlsCredentials, o: TlsClientOptions): Agent {
  return new Agent({
    // One context for every connection: given the PEMs instead, each new connection parsed the key, the
    // certificate and the CA again (setKey, setCert, addCACert: most of a simulated fleet's CPU while 1,000 agents
    // reconnected at once).
    connect: { secureContext: createSecureContext({ cert: c.certPem, key: c.keyPem, ca: c.caPem }) },
    ...(o.connections !== undefined ? { connections: o.connections } : {}),
    ...(o.closeAfterMs !== undefined ? { headersTimeout: o.closeAfterMs, bodyTimeout: o.closeAfterMs } : {}),
  });
}

/** A TimeoutError, as AbortSignal.timeout's reason is one. */
function timeoutError(ms: number): Error {
  return Object.assign(new Error(`no answer within ${ms} ms`), { name: 'TimeoutError' });
}

/** fetch with a client certificate. */
export class TlsClient {
  private agent: Agent;

  constructor(
    credentials: TlsCredentials,
    private readonly options: TlsClientOptions = {},
  ) {
    this.agent = dispatcher(credentials, options);
  }

  /** Like global fetch, over this client's certificate. */
  readonly fetch = async (url: string, init: FetchInit = {}): Promise<Response> =>
    (await undiciFetch(url, { ...init, dispatcher: this.agent } as UndiciInit)) as unknown as Response;

  /**
   * Like `fetch`, on undici's `request`: no WHATWG streams, Headers or Response per call. What the agent's
   * heartbeat, once a second from every node, goes through: 0.2 ms of CPU a call where fetch took 0.6-0.8 ms
   * (docs/architecture.md, Scale).
   *
   * `timeoutMs` bounds the wait for the answer, its body's reading included: past it the promise (or the body's
   * read) rejects with a TimeoutError, as with `AbortSignal.timeout`, but the request is not aborted. It goes on,
   * and a late answer is read and dropped, so its connection stays open for the next request. Aborting it would
   * close the connection (HTTP/1.1 cannot cancel a request otherwise), and every caller of a slow server would open
   * a new one, a TLS handshake each, on the server that was already too slow: at 1,000 simulated nodes this turned a
   * busy control plane into a full accept queue and agents silent for minutes (docs/architecture.md, Scale). What
   * ends a request that never gets its answer is `closeAfterMs`.
   */
  readonly request = (url: string, init: FetchInit & { timeoutMs?: number } = {}): Promise<LightResponse> => {
    const sent = undiciRequest(url, {
      method: (init.method ?? 'GET') as 'GET',
      ...(init.headers ? { headers: init.headers } : {}),
      ...(init.body !== undefined ? { body: init.body } : {}),
      ...(init.signal ? { signal: init.signal } : {}),
      dispatcher: this.agent,
    });
    const ms = init.timeoutMs;
    if (ms === undefined) return sent.then((r) => lightResponse(r, (p) => p));
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(timeoutError(ms)), ms).unref();
    });
    expired.catch(() => undefined);
    // The body's reads race the same deadline; one that loses goes on, and what it reads is dropped.
    const inTime = <T>(p: Promise<T>): Promise<T> => {
      p.catch(() => undefined);
      return Promise.race([p, expired]).finally(() => clearTimeout(timer));
    };
    return Promise.race([sent, expired]).then(
      (r) => lightResponse(r, inTime),
      (err: unknown) => {
        // Too late: the answer, when it comes, is read to its end and dropped.
        void sent.then(
          (r) => r.body.dump().catch(() => undefined),
          () => undefined,
        );
        clearTimeout(timer);
        throw err;
      },
    );
  };

  /** Presents `credentials` from the next connection on; the old connections close when idle. */
  use(credentials: TlsCredentials): void {
    const old = this.agent;
    this.agent = dispatcher(credentials, this.options);
    void old.close().catch(() => undefined);
  }

  /** Closes every connection. */
  async close(): Promise<void> {
    await this.agent.destroy().catch(() => undefined);
  }
}

/** undici's answer as a LightResponse; `read` wraps each read of its body (the caller's deadline). */
function lightResponse(
  r: Awaited<ReturnType<typeof undiciRequest>>,
  read: <T>(p: Promise<T>) => Promise<T>,
): LightResponse {
  const status = r.statusCode;
  const body = r.body;
  return {
    status,
    ok: status >= 200 && status < 300,
    text: () => read(body.text()),
    json: () => read(body.json()),
    body: { cancel: () => read(body.dump().then(() => undefined)) },
  };
}
