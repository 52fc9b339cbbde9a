/**
 * The gateway's client to the replicas: one undici dispatcher for every upstream, plain HTTP to an engine and
 * keep-alive TLS with the gateway certificate to a node's door (the door's certificate checked as the node's before a
 * byte of a prompt is sent: lib/door-agent.ts). undici rather than node:http's request and Agent: a request through
 * undici's dispatcher costs about a third less CPU than node:http's client, and the bare node:http proxy of
 * `npm run bench:peers` is the floor the gateway is measured against (docs/architecture.md, "Beside other proxies").
 *
 * Timeouts are the proxy's own (proxy.ts: first byte, then idle), so undici's are off; undici closes an idle
 * connection after 4 s or sooner when the replica's keep-alive hint says so, before engines that close theirs after
 * 5 s (uvicorn: vLLM, SGLang) do, so a request rarely meets a connection the replica closed while it was idle.
 */
import { Agent, buildConnector, type Dispatcher } from 'undici';
import type { DoorAgent } from '../../lib/door-agent';

/**
 * The dispatcher for every replica: `connectMs` to open a connection; https origins (the nodes' doors) through
 * `door`'s certificate and checks. Without `door`, a door's origin is refused at connect.
 */
export function upstreamDispatcher(connectMs: number, door?: DoorAgent): Agent {
  const plain = buildConnector({ timeout: connectMs });
  const doorConnect = door?.connector();
  return new Agent({
    connect: (o, cb) => {
      if (o.protocol !== 'https:') return plain(o, cb);
      if (doorConnect) return doorConnect(o, cb);
      cb(new Error('no gateway certificate to present at a node door (server.yaml tls.gatewayCert)'), null);
    },
    headersTimeout: 0,
    bodyTimeout: 0,
    pipelining: 1,
  });
}

/** The answer's headers the proxy reads, from undici's raw headers (names as sent; compared in lower case). */
export interface AnswerHead {
  /** content-type, content-length and cache-control as the replica sent them */
  pass: Record<string, string>;
  contentType: string;
  /** The node door's own 404 (the replica is not on that node) */
  doorMiss: boolean;
}

/** Headers passed on to the client: hop-by-hop ones are Node's business, x-request-id is the gateway's own. */
const PASS = new Set(['content-type', 'content-length', 'cache-control']);

/** Reads the head of an answer from undici's raw header list (name, value, name, value…). */
export function answerHead(raw: Buffer[], doorMissHeader: string): AnswerHead {
  const pass: Record<string, string> = {};
  let doorMiss = false;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = (raw[i] as Buffer).toString('latin1').toLowerCase();
    if (PASS.has(name)) pass[name] = (raw[i + 1] as Buffer).toString('latin1');
    else if (name === doorMissHeader) doorMiss = true;
  }
  return { pass, contentType: pass['content-type'] ?? '', doorMiss };
}

export type { Dispatcher };
