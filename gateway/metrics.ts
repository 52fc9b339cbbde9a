/**
 * A role's metrics listener: `GET /metrics` in Prometheus' text format from one prom-client registry, on a port
 * of its own (server.yaml listeners.metrics.<role>, or an agent's --metrics), never the role's public one.
 */
import { createServer } from 'node:http';
import type { Registry } from 'prom-client';

/** A listening metrics endpoint. */
export interface MetricsListener {
  /** `http://host:port/metrics` */
  url: string;
  close(): Promise<void>;
}

/** Serves `registry` on host:port (0: any free port, see `url`). */
export async function startMetricsListener(o: {
  host: string;
  port: number;
  registry: Registry;
}): Promise<MetricsListener> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics')
      return void res.writeHead(404, { 'content-type': 'text/plain' }).end('only GET /metrics here\n');
    o.registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': o.registry.contentType }).end(text),
      (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${err.message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => resolve());
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : o.port;
  const host = o.host.includes(':') ? `[${o.host}]` : o.host;
  return {
    url: `http://${host}:${port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
