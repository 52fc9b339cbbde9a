/** The gateway's log: JSON lines with a level and, for a request, its id; request ids and the optional access log. */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** The role's structured logger (cli/log.ts's makeLog): a message and fields, one JSON line each. */
export type GatewayLog = (msg: string, fields?: Record<string, unknown>) => void;

/** A logger that drops everything, for tests and embedders that pass none. */
export const silentLog: GatewayLog = () => undefined;

// Long enough for a UUID, a trace id or a vendor's prefixed id; printable ASCII only, so it is safe in a log line and a header.
const REQUEST_ID_RE = /^[\x21-\x7e]{1,128}$/;

/** The client's `x-request-id` when it is a short printable token, else a fresh UUID. */
export function requestId(header: string | string[] | undefined): string {
  return typeof header === 'string' && REQUEST_ID_RE.test(header) ? header : randomUUID();
}

/** What the access log line says about a proxied request; the proxy fills it in as it goes. */
export interface AccessNote {
  model?: string;
  replica?: string;
  /** body bytes sent to the client */
  bytes: number;
  /** why the request ended in an error, when it did */
  error?: string;
}

/**
 * Starts the access-log line of one request: written once when its response closes (finished, cut, or the client
 * gone), with method, path, model, replica, status, duration and bytes. Returns the note the routes fill in.
 */
export function accessLine(log: GatewayLog, reqId: string, req: IncomingMessage, res: ServerResponse): AccessNote {
  const t0 = performance.now();
  const note: AccessNote = { bytes: 0 };
  res.once('close', () => {
    // A proxied answer's bytes are counted as they pass; the gateway's own answers carry a content-length.
    const bytes = note.replica === undefined ? Number(res.getHeader('content-length') ?? 0) : note.bytes;
    log('request', {
      level: 'info',
      reqId,
      method: req.method,
      path: req.url,
      model: note.model,
      replica: note.replica,
      status: res.statusCode,
      ms: Math.round((performance.now() - t0) * 10) / 10,
      bytes,
      ...(res.writableFinished ? {} : { cut: true }),
      ...(note.error ? { error: note.error } : {}),
    });
  });
  return note;
}
