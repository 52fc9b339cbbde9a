/**
 * Who is asking, for the control API's routes: a node only by its verified certificate's CN, and one error
 * shape for refusals and for bodies a schema refused.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { LlmgwError, openAiError, type ErrorCode } from '../../lib/errors';
import { parseNodeId, type NodeId } from '../../lib/types';

/** A control route's log: a message and fields. */
export type ControlLog = (msg: string, fields: Record<string, unknown>) => void;

/** The JSON schema of a refusal (OpenAI's error shape). */
export const errorSchema = {
  type: 'object',
  properties: { error: { type: 'object', additionalProperties: true } },
} as const;

/**
 * The node a request comes from: the CN of its connection's verified client certificate (`req.peer`, set by
 * the mTLS gate), never the body's claim. A claim of another id is refused (LLMGW_CERT_REFUSED, 403).
 */
export function nodeIdentity(req: FastifyRequest, claimed: string): NodeId {
  const peer = req.peer;
  if (!peer || peer.role !== 'node') {
    throw new LlmgwError('LLMGW_CERT_REFUSED', 'agent routes need a node client certificate (mutual TLS)', {
      cn: peer?.cn ?? null,
      claimed,
      reason: 'no node certificate on the connection',
    });
  }
  if (claimed !== peer.cn) {
    const reason = `the certificate is ${peer.cn}'s; a node speaks only for itself`;
    throw new LlmgwError('LLMGW_CERT_REFUSED', `node id "${claimed}" refused: ${reason}`, {
      cn: peer.cn,
      claimed,
      reason,
    });
  }
  return parseNodeId(peer.cn);
}

/**
 * nodeIdentity for a route handler: the node, or null once the refusal is sent (and, for a certificate's claim
 * of another node, logged with the CN, the claimed id and the reason).
 */
export function identify(req: FastifyRequest, reply: FastifyReply, claimed: string, log: ControlLog): NodeId | null {
  try {
    return nodeIdentity(req, claimed);
  } catch (err) {
    const e = err as LlmgwError;
    const code: ErrorCode = e.code ?? 'LLMGW_BAD_REQUEST';
    if (code === 'LLMGW_CERT_REFUSED') log('node identity refused', { ...e.context, url: req.url.split('?')[0] });
    void reply.code(e.status ?? 400).send(openAiError(code, e.message));
    return null;
  }
}
