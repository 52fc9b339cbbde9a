/**
 * One error shape for every route of every listener (the inference API, the control API): OpenAI's, with an llmgw
 * code — for the routes' own refusals, for what fastify refuses before a route runs (a schema, a body that is not
 * JSON or too large, a content type, an unknown route), for what Node refuses before fastify sees a request (a
 * stalled upload, headers too large), and for internal errors, which are logged with the route and answered
 * without their internals.
 */
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ERRORS, openAiError, quoteInput, type ErrorCode } from '../lib/errors';

/** A listener's log: a message and fields. */
export type ErrorLog = (msg: string, fields: Record<string, unknown>) => void;

/** The catalogue code of a status fastify or Node answers with before a route runs. */
const BY_STATUS: Record<number, ErrorCode> = {
  404: 'LLMGW_NOT_FOUND',
  408: 'LLMGW_REQUEST_TIMEOUT',
  413: 'LLMGW_BODY_TOO_LARGE',
  415: 'LLMGW_UNSUPPORTED_MEDIA_TYPE',
  431: 'LLMGW_HEADERS_TOO_LARGE',
};

interface AjvIssue {
  instancePath?: string;
  message?: string;
  params?: { additionalProperty?: string; allowedValues?: unknown[] };
}

/** A schema refusal as one line naming the field: `body.inventory: unknown field "extra"`. */
function validationMessage(err: FastifyError): string {
  const first = (err.validation as AjvIssue[] | undefined)?.[0];
  if (!first) return err.message;
  const where = `${err.validationContext ?? 'body'}${(first.instancePath ?? '').replace(/\//g, '.')}`;
  if (first.params?.additionalProperty !== undefined)
    return `${where}: unknown field ${quoteInput(first.params.additionalProperty)}`;
  if (first.params?.allowedValues)
    return `${where}: ${first.message ?? 'invalid'} (${first.params.allowedValues.map((v) => JSON.stringify(v)).join(', ')})`;
  return `${where}: ${first.message ?? 'invalid'}`;
}

/** The code and message for an error fastify raised before the route ran (or a route threw). */
function describe(
  err: FastifyError & { code?: string; status?: number },
  req: FastifyRequest,
): { code: ErrorCode; message: string } | null {
  if (err.validation) return { code: 'LLMGW_BAD_REQUEST', message: validationMessage(err) };
  // A catalogue error thrown by a route (LlmgwError, or one that crossed a realm): its own code and message.
  if (typeof err.code === 'string' && Object.hasOwn(ERRORS, err.code))
    return { code: err.code as ErrorCode, message: err.message };
  switch (err.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return {
        code: 'LLMGW_UNSUPPORTED_MEDIA_TYPE',
        message: `send the body as JSON with content-type: application/json (got ${quoteInput(req.headers['content-type'] ?? 'none')})`,
      };
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return {
        code: 'LLMGW_BODY_TOO_LARGE',
        message: `the request body is larger than this route takes (${req.routeOptions.bodyLimit ?? 'its limit'} bytes)`,
      };
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return { code: 'LLMGW_BAD_REQUEST', message: 'the request body is empty: send a JSON object' };
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return { code: 'LLMGW_BAD_REQUEST', message: 'the request body is not valid JSON' };
    default:
  }
  if (err.name === 'SyntaxError' && err.statusCode === 400)
    return {
      code: 'LLMGW_BAD_REQUEST',
      message: `the request body is not valid JSON: ${quoteInput(err.message, 100)}`,
    };
  const status = err.statusCode ?? 500;
  if (status >= 500) return null;
  return { code: BY_STATUS[status] ?? 'LLMGW_BAD_REQUEST', message: err.message };
}

/**
 * Answers every error of `app`'s routes in OpenAI's shape. An error that is not the client's is logged with the
 * method, the route, the request id and the error, and answered LLMGW_INTERNAL naming only the request id.
 */
export function answerErrors(app: FastifyInstance, log: ErrorLog): void {
  app.setErrorHandler((err: FastifyError, req: FastifyRequest, reply: FastifyReply) => {
    const known = describe(err, req);
    if (known) {
      const status = ERRORS[known.code].status;
      if (status >= 500)
        log('request failed', {
          level: 'error',
          method: req.method,
          route: req.routeOptions.url ?? req.url.split('?')[0],
          reqId: req.id,
          code: known.code,
          error: known.message,
        });
      return reply.code(status).send(openAiError(known.code, known.message));
    }
    log('internal error', {
      level: 'error',
      method: req.method,
      route: req.routeOptions.url ?? req.url.split('?')[0],
      reqId: req.id,
      error: err.message,
      stack: err.stack,
    });
    return reply
      .code(500)
      .send(openAiError('LLMGW_INTERNAL', `internal error (request ${req.id}); the server's log has the details`));
  });
}

/** Answers a request no route takes with 404 LLMGW_NOT_FOUND naming the method, the path and what is served. */
export function answerUnknownRoutes(app: FastifyInstance, served: string): void {
  app.setNotFoundHandler((req: FastifyRequest, reply: FastifyReply) => {
    const message = `no route ${req.method} ${quoteInput(req.url.split('?')[0], 100)}: this listener serves ${served}`;
    return reply.code(404).send(openAiError('LLMGW_NOT_FOUND', message));
  });
}

const ANSWERED = Symbol('llmgw.clientErrorAnswered');

/**
 * fastify's `clientErrorHandler`: what Node refuses before a request reaches fastify — a body that stopped coming
 * (408), headers too large (431), bytes that are not HTTP (400) — in OpenAI's shape. The answer is written, then
 * the connection is half-closed and what the client still sends is read and dropped for a moment: closing with
 * unread bytes would reset the connection, and a client still writing its 100 KB of headers would get the reset
 * instead of the answer.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  const s = socket as Socket & { [ANSWERED]?: boolean; _httpMessage?: { headersSent?: boolean } | null };
  if (err.code === 'ECONNRESET' || s.destroyed || s[ANSWERED]) return;
  s[ANSWERED] = true;
  if (!s.writable || s._httpMessage?.headersSent) return void s.destroy();
  const [code, message]: [ErrorCode, string] =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [
          'LLMGW_REQUEST_TIMEOUT',
          'the request did not arrive in time: its headers or body stopped coming (a Content-Length larger than the body sent, or a chunked body without its last chunk)',
        ]
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? ['LLMGW_HEADERS_TOO_LARGE', 'the request headers are larger than 16 KiB']
        : ['LLMGW_BAD_REQUEST', `the request is not valid HTTP/1.1 (${err.code ?? err.message})`];
  const status = ERRORS[code].status;
  const body = JSON.stringify(openAiError(code, message));
  s.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
  s.resume();
  setTimeout(() => s.destroy(), 2000).unref();
}
