/**
 * HTTPS with a client certificate on `node:https` alone: what `llmgw ctl` reaches the control plane with. A
 * command-line run pays for every module it loads, and undici (lib/tls-client.ts, which the agent keeps for its
 * streaming bodies and failover) cost more to load than the rest of `llmgw ctl nodes` together (docs/development.md,
 * bench:cli). One keep-alive Agent per client, so a verb that polls reuses its connection; idle sockets do not keep
 * the process alive.
 */
import { Agent, request } from 'node:https';
import type { FetchInit, TlsCredentials } from './tls-client';

/** What a control plane answered: the subset of fetch's Response the CLI reads, the body already read whole. */
export interface HttpsResponse {
  readonly ok: boolean;
  readonly status: number;
  text(): Promise<string>;
  json(): Promise<unknown>;
}

/** fetch-like requests over one certificate; bodies are read whole before the promise resolves. */
export class HttpsClient {
  private readonly agent: Agent;

  constructor(c: TlsCredentials) {
    this.agent = new Agent({ keepAlive: true, cert: c.certPem, key: c.keyPem, ca: c.caPem });
  }

  /**
   * Like fetch(url, init), but the answer's body is read before it resolves. `init.signal` aborts the whole
   * exchange (connecting, sending, reading) and rejects with its reason, as fetch does; a connection error rejects
   * with Node's own error (`connect ECONNREFUSED 127.0.0.1:7443`), which says more than fetch's "fetch failed".
   */
  readonly fetch = (url: string, init: FetchInit = {}): Promise<HttpsResponse> =>
    new Promise((resolve, reject) => {
      const { signal } = init;
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const headers: Record<string, string | number> = { ...init.headers };
      if (init.body !== undefined) headers['content-length'] = Buffer.byteLength(init.body);
      const req = request(url, { method: init.method ?? 'GET', headers, agent: this.agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', fail);
        res.on('end', () => {
          signal?.removeEventListener('abort', onAbort);
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          resolve({
            ok: status >= 200 && status < 300,
            status,
            text: () => Promise.resolve(text),
            json: () => Promise.resolve().then(() => JSON.parse(text) as unknown),
          });
        });
      });
      function fail(err: Error): void {
        signal?.removeEventListener('abort', onAbort);
        reject(err);
      }
      function onAbort(): void {
        reject(signal?.reason);
        req.destroy();
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      req.on('error', fail);
      req.end(init.body);
    });

  /** Closes every connection. */
  close(): void {
    this.agent.destroy();
  }
}
