/**
 * HTTPS to the control plane with a client certificate: undici's fetch over an undici Agent whose connections
 * present `cert`/`key` and trust only `ca`. The agent, `llmgw ctl` and the tests use it; `use()` swaps the
 * certificate (a renewal) for new connections and closes the old ones once their requests are done.
 */
import { Agent, fetch as undiciFetch, type RequestInit as UndiciInit } from 'undici';

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
