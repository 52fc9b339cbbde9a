/** The inference gateway on a real port in front of tiny upstream HTTP servers whose behaviour each test chooses. */
import type { DoorAgent } from '../../lib/door-agent';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { GatewayAdmission, GatewayTimeouts } from '../../config/types';
import type { RouteRows } from '../../lib/store/store';
import { RoutingTable, type RoutingOptions } from '../../gateway/inference/routing';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import { TEST_API_KEY } from './test-key';

export type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void | Promise<void>;
/** An upstream: its endpoint, the requests it received (`METHOD path`), their headers, and how many it saw cut. */
export interface Upstream {
  endpoint: string;
  hits: string[];
  /** the gateway's GET /props (its ask for the engine's slots, routing.ts): apart from `hits`, which are requests */
  probes: number;
  headers: IncomingMessage['headers'][];
  closedEarly: number;
  close(): Promise<void>;
}
/** A gateway under test, with the lines it logged. */
export interface TestGateway {
  url: string;
  routing: RoutingTable;
  lines: LogLine[];
  /** its metrics page, when started with `metrics: true` */
  metricsUrl: string | null;
}
/** One line of the gateway's log, as the role's logger would write it. */
export type LogLine = { msg: string } & Record<string, unknown>;

const servers: Server[] = [];
let gateways: RunningGateway[] = [];

/** Resolves after `ms`. */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * A tiny OpenAI-shaped engine on port 0 whose behaviour the test chooses. The gateway's GET /props (its ask for
 * the engine's slots) is counted in `probes` and answered 404 (no slots reported: the default limit), unless
 * `o.props` hands it to the handler.
 */
export async function upstream(handler: Handler, o: { props?: boolean } = {}): Promise<Upstream> {
  const u: Upstream = { endpoint: '', hits: [], probes: 0, headers: [], closedEarly: 0, close: async () => undefined };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'GET' && req.url === '/props') {
        u.probes++;
        if (!o.props) return void res.writeHead(404).end();
      } else u.hits.push(`${req.method} ${req.url}`);
      u.headers.push(req.headers);
      res.once('close', () => {
        if (!res.writableFinished) u.closedEarly++;
      });
      void handler(req, res, Buffer.concat(chunks).toString('utf8'));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  servers.push(server);
  u.endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  u.close = async (): Promise<void> => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  };
  return u;
}

/** A non-streamed chat completion body. */
export const completion = (model: string, text = 'hello'): string =>
  JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  });
/** One SSE event of a streamed chat completion. */
export const chunk = (model: string, content: string, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;

/** Answers like an engine: JSON for plain requests, SSE (one chunk per `delayMs`) for `stream: true`. */
export const engine =
  (delayMs = 0): Handler =>
  async (_req, res, body) => {
    const b = JSON.parse(body) as { model: string; stream?: boolean };
    if (!b.stream) return void res.writeHead(200, { 'content-type': 'application/json' }).end(completion(b.model));
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    for (const w of ['Hel', 'lo', '!']) {
      res.write(chunk(b.model, w));
      await sleep(delayMs);
    }
    res.end(`${chunk(b.model, '', 'stop')}data: [DONE]\n\n`);
  };

/** A routing row of a ready replica. */
export const ready = (id: string, model: string, endpoint: string): RouteRows['replicas'][number] => ({
  id,
  model,
  state: 'ready',
  endpoint,
  reason: null,
});
/** A routing table over fixed rows that never refreshes by itself. */
export const table = (rows: RouteRows, opts: Partial<RoutingOptions> = {}): RoutingTable =>
  new RoutingTable(async () => rows, { refreshMs: 60_000, ...opts });
/** A chat completion request body. */
export const chat = (model: string, extra: Record<string, unknown> = {}): string =>
  JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], ...extra });
/** POSTs a JSON body, with the test configs' static key (a gateway without keys ignores it). */
export const post = (url: string, body: string, init: RequestInit = {}): Promise<Response> =>
  fetch(url, {
    method: 'POST',
    body,
    ...init,
    headers: {
      'content-type': 'application/json',
      authorization: `Bearer ${TEST_API_KEY}`,
      ...(init.headers ?? {}),
    },
  });

/** Starts a gateway on a free port over `rows`; its log lines are kept in `lines`. */
export async function gateway(
  rows: RouteRows,
  o: {
    apiKeys?: string[];
    timeouts?: GatewayTimeouts;
    accessLog?: boolean;
    routing?: Partial<RoutingOptions>;
    admission?: GatewayAdmission;
    metrics?: boolean;
    /** the pool to the nodes' doors, with a gateway certificate (lib/door-agent.ts) */
    doorAgent?: DoorAgent;
    /** largest inference body, bytes */
    bodyLimit?: number;
  } = {},
): Promise<TestGateway> {
  const lines: LogLine[] = [];
  const log = (msg: string, fields?: Record<string, unknown>): void => void lines.push({ msg, ...fields });
  const routing = table(rows, { log, ...o.routing });
  const gw = await startGateway({
    host: '127.0.0.1',
    port: 0,
    routing,
    apiKeys: o.apiKeys ?? [],
    log,
    timeouts: o.timeouts,
    accessLog: o.accessLog,
    admission: o.admission,
    metrics: o.metrics ? { host: '127.0.0.1', port: 0 } : null,
    doorAgent: o.doorAgent,
    bodyLimit: o.bodyLimit,
  });
  gateways.push(gw);
  return { url: gw.url, routing, lines, metricsUrl: gw.metricsUrl };
}

/** Closes every gateway and upstream the test started (afterEach). */
export async function closeAll(): Promise<void> {
  await Promise.all(gateways.map((g) => g.close()));
  gateways = [];
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    s.close();
  }
}
