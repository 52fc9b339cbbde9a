/** How `llmgw ctl` reaches the control plane: HTTPS with the operator certificate named in server.yaml's tls section. */
import { readFileSync } from 'node:fs';
import type { ServerConfig } from '../config/types';
import { quoteInput } from '../lib/errors';
import { HttpsClient, type HttpsResponse } from '../lib/https-client';
import type { FetchInit } from '../lib/tls-client';
import { UsageError } from './args';

/**
 * The control plane's base URL and a fetch presenting the operator certificate: an HttpsClient's (node:https, as
 * loading undici cost a ctl run more than the rest of it), or a test's global fetch.
 */
export interface ControlApi {
  server: string;
  fetch: (url: string, init?: FetchInit) => Promise<HttpsResponse>;
}

function read(config: ServerConfig, key: 'ca' | 'clientCert' | 'clientKey'): string {
  const file = config.tls[key];
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    const fix =
      key === 'ca'
        ? "point tls.ca at the cluster CA's ca.crt"
        : 'issue one with llmgw ca issue --operator NAME and point tls.clientCert/clientKey at it';
    throw new UsageError(
      `tls.${key} ${file} cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)}): ${fix} (--config FILE)`,
    );
  }
}

/**
 * The control plane at `--server` (default listeners.controlPlane, https), with the operator certificate —
 * read at the first request, so commands that only talk to Temporal need none.
 */
export function controlApi(config: ServerConfig, serverFlag: string | undefined): ControlApi {
  const { host, port } = config.listeners.controlPlane;
  if (serverFlag !== undefined && !/^https:\/\/[^/\s?#]+\/?$/.test(serverFlag)) {
    throw new UsageError(
      `--server ${quoteInput(serverFlag, 100)} is not the control plane's URL: give https://HOST:PORT, e.g. https://127.0.0.1:${port} (it speaks only mutual TLS)`,
    );
  }
  const server = (serverFlag ?? `https://${host}:${port}`).replace(/\/$/, '');
  let client: HttpsClient | undefined;
  return {
    server,
    fetch: (url, init) =>
      (client ??= new HttpsClient({
        caPem: read(config, 'ca'),
        certPem: read(config, 'clientCert'),
        keyPem: read(config, 'clientKey'),
      })).fetch(url, init),
  };
}

/**
 * Calls the control plane at `path` (waiting up to `timeoutMs`). A refusal (4xx) throws a UsageError with the
 * control plane's own message, a failure (5xx) an Error with it; an unreachable control plane says so.
 */
export async function callControl<T>(
  api: ControlApi,
  path: string,
  init: { method?: 'GET' | 'POST'; body?: unknown; timeoutMs?: number } = {},
): Promise<T> {
  let res: HttpsResponse;
  try {
    const body =
      init.body === undefined
        ? {}
        : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(init.body) };
    res = await api.fetch(`${api.server}${path}`, {
      method: init.method ?? 'GET',
      signal: AbortSignal.timeout(init.timeoutMs ?? 10_000),
      ...body,
    });
  } catch (err) {
    if (err instanceof UsageError) throw err; // e.g. the operator certificate is missing
    throw new UsageError(
      `cannot reach the control plane at ${api.server} (${(err as Error).message}): is it running? pass --server URL`,
    );
  }
  const text = await res.text();
  let parsed: (T & { error?: { message?: string } }) | undefined;
  try {
    parsed = JSON.parse(text) as T & { error?: { message?: string } };
  } catch {
    parsed = undefined;
  }
  if (res.ok && parsed !== undefined) return parsed;
  const message = parsed?.error?.message ?? `${init.method ?? 'GET'} ${path}: HTTP ${res.status} ${text.slice(0, 200)}`;
  throw res.status < 500 ? new UsageError(message) : new Error(message);
}

/** POSTs to the control plane (waiting up to `timeoutMs`); see callControl. */
export function postControl<T>(api: ControlApi, path: string, body?: unknown, timeoutMs = 10_000): Promise<T> {
  return callControl<T>(api, path, { method: 'POST', body, timeoutMs });
}
