/** How `llmgw ctl` reaches the control plane: HTTPS with the operator certificate named in server.yaml's tls section. */
import { readFileSync } from 'node:fs';
import type { ServerConfig } from '../config/types';
import { TlsClient } from '../lib/tls-client';
import { UsageError } from './args';

/** The control plane's base URL and a fetch presenting the operator certificate. */
export interface ControlApi {
  server: string;
  fetch: TlsClient['fetch'];
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
  const server = (serverFlag ?? `https://${host}:${port}`).replace(/\/$/, '');
  let client: TlsClient | undefined;
  return {
    server,
    fetch: (url, init) =>
      (client ??= new TlsClient({
        caPem: read(config, 'ca'),
        certPem: read(config, 'clientCert'),
        keyPem: read(config, 'clientKey'),
      })).fetch(url, init),
  };
}

/** POSTs to the control plane (waiting up to `timeoutMs`); a refusal throws its message, an unreachable control plane says so. */
export async function postControl<T>(api: ControlApi, path: string, body?: unknown, timeoutMs = 10_000): Promise<T> {
  let res: Response;
  try {
    res = await api.fetch(`${api.server}${path}`, {
      method: 'POST',
      signal: AbortSignal.timeout(timeoutMs),
      ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
    });
  } catch (err) {
    if (err instanceof UsageError) throw err; // e.g. the operator certificate is missing
    throw new UsageError(
      `cannot reach the control plane at ${api.server} (${(err as Error).message}): is it running? pass --server URL`,
    );
  }
  const parsed = (await res.json()) as T & { error?: { message: string } };
  if (!res.ok) throw new UsageError(parsed.error?.message ?? `HTTP ${res.status}`);
  return parsed;
}
