/**
 * The agent's weights endpoint: other nodes of the cluster fetch whole files of this node's cache from it
 * (`GET /v1/weights/<key>`, with Range, so a peer's fetch resumes too). Mutual TLS: the node's own certificate
 * serves, and a client must present a certificate of the cluster CA (checked in the handshake) that the control
 * plane still honours (`allowSerial`: revocation, cached a minute). Never serves a partial file.
 */
import { createReadStream } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { pipeline } from 'node:stream/promises';
import { openAiError } from '../errors';
import { TLS_HANDSHAKE_MS, trackConnections } from '../connections';
import type { HeldFile } from './cache';

export interface WeightsServerOptions {
  /** the cache's lookup of a whole file by key */
  file: (key: string) => Promise<HeldFile | null>;
  /** the node's certificate and key (served) and the cluster CA (client certificates are checked by it) */
  tls: { certPem: string; keyPem: string; caPem: string };
  host: string;
  /** 0: any free port */
  port: number;
  /** whether a client certificate (serial, CN) may still be used; absent: CA signature and validity only */
  allowSerial?: (serial: string, cn: string) => Promise<boolean>;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface WeightsServer {
  port: number;
  /** Serves with a renewed certificate from the next connection on. */
  useCredentials(tls: WeightsServerOptions['tls']): void;
  close(): Promise<void>;
}

const ALLOW_CACHE_MS = 60_000;

/** `bytes=START-` or `bytes=START-END` within `size`, or 'bad' when unsatisfiable, or null when absent. */
export function parseRange(h: string | undefined, size: number): { start: number; end: number } | 'bad' | null {
  if (!h) return null;
  const m = /^bytes=(\d+)-(\d*)$/.exec(h.trim());
  if (!m) return 'bad';
  const start = Number(m[1]);
  const end = m[2] ? Math.min(Number(m[2]), size - 1) : size - 1;
  return start < size && start <= end ? { start, end } : 'bad';
}

/** Starts the weights endpoint; see the module comment. */
export async function startWeightsServer(o: WeightsServerOptions): Promise<WeightsServer> {
  const log = o.log ?? ((): void => undefined);
  const allowed = new Map<string, { ok: boolean; at: number }>();
  const mayUse = async (serial: string, cn: string): Promise<boolean> => {
    if (!o.allowSerial) return true;
    const hit = allowed.get(serial);
    if (hit && Date.now() - hit.at < ALLOW_CACHE_MS) return hit.ok;
    const ok = await o.allowSerial(serial, cn);
    allowed.set(serial, { ok, at: Date.now() });
    return ok;
  };
  const send = (res: ServerResponse, status: number, body: unknown): void => {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const peer = (req.socket as TLSSocket).getPeerCertificate();
    const cn = peer.subject?.CN ?? '?';
    const serial = (peer.serialNumber ?? '').toLowerCase();
    if (!(await mayUse(serial, String(cn)))) {
      log('weights request refused', {
        cn,
        serial,
        reason: 'the control plane does not honour this certificate (revoked?)',
      });
      return send(
        res,
        403,
        openAiError('LLMGW_CERT_REFUSED', `certificate ${serial} (CN ${cn}) is not honoured by the control plane`),
      );
    }
    const m = /^\/v1\/weights\/([^/?]+)$/.exec(req.url ?? '');
    if (!m || (req.method !== 'GET' && req.method !== 'HEAD'))
      return send(res, 404, openAiError('LLMGW_BAD_REQUEST', 'only GET /v1/weights/<key> is served here'));
    const key = m[1] as string;
    const file = await o.file(key);
    if (!file) return send(res, 404, openAiError('LLMGW_WEIGHTS_NOT_FOUND', `this node holds no whole file ${key}`));
    const etag = `"${file.sha256}"`;
    const ifRange = req.headers['if-range'];
    const range = ifRange && ifRange !== etag ? null : parseRange(req.headers.range, file.size);
    if (range === 'bad') {
      res.writeHead(416, { 'content-range': `bytes */${file.size}` }).end();
      return;
    }
    const { start, end } = range ?? { start: 0, end: file.size - 1 };
    const headers: Record<string, string | number> = {
      'content-type': 'application/octet-stream',
      'content-length': end - start + 1,
      'accept-ranges': 'bytes',
      etag,
    };
    if (range) headers['content-range'] = `bytes ${start}-${end}/${file.size}`;
    res.writeHead(range ? 206 : 200, headers);
    if (req.method === 'HEAD' || file.size === 0) {
      res.end();
      return;
    }
    log('weights served', { key, to: cn, from: start, bytes: end - start + 1 });
    await pipeline(createReadStream(file.path, { start, end, highWaterMark: 1 << 20 }), res).catch((err: Error) =>
      log('weights transfer to a peer ended early', { key, to: cn, error: err.message }),
    );
  };

  const server: Server = createServer(
    {
      cert: o.tls.certPem,
      key: o.tls.keyPem,
      ca: o.tls.caPem,
      requestCert: true,
      rejectUnauthorized: true,
      handshakeTimeout: TLS_HANDSHAKE_MS,
    },
    (req, res) => {
      handle(req, res).catch((err: Error) => {
        log('weights request failed', { url: req.url, error: err.message });
        if (!res.headersSent) send(res, 500, openAiError('LLMGW_WEIGHTS_FETCH_FAILED', err.message));
        else res.destroy();
      });
    },
  );
  server.on('tlsClientError', (err) => log('weights endpoint refused a TLS client', { error: err.message }));
  // closeAllConnections cuts HTTP connections; a handshake that stalls is not one yet, and would hold close().
  const connections = trackConnections(server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    useCredentials: (tls) => server.setSecureContext({ cert: tls.certPem, key: tls.keyPem, ca: tls.caPem }),
    close: () =>
      connections.closeWithin(
        0,
        () =>
          new Promise<void>((resolve) => {
            server.close(() => resolve());
            server.closeAllConnections();
          }),
      ),
  };
}
