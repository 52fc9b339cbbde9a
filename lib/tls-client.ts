/**
 * HTTPS to the control plane with a client certificate: undici over an undici Agent whose connections present
 * `cert`/`key` and trust only `ca`. The agent, `llmgw ctl` and the tests use it; `use()` swaps the certificate (a
 * renewal) for new connections and closes the old ones once their requests are done.
 */
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
   * (docs/architecture.md, Scale).
   */
  readonly request = async (url: string, init: FetchInit = {}): Promise<LightResponse> => {
    const r = await undiciRequest(url, {
      method: (init.method ?? 'GET') as 'GET',
      ...(init.headers ? { headers: init.headers } : {}),
      ...(init.body !== undefined ? { body: init.body } : {}),
      ...(init.signal ? { signal: init.signal } : {}),
      dispatcher: this.agent,
    });
    const status = r.statusCode;
    return {
      status,
      ok: status >= 200 && status < 300,
      text: () => r.body.text(),
      json: () => r.body.json(),
      body: { cancel: () => r.body.dump().then(() => undefined) },
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
