/**
 * The floor of `npm run bench:peers`: the least an HTTP proxy on Node can do — node:http in, node:http out over a
 * keep-alive pool, hop-by-hop headers dropped, bodies piped both ways, no routing, no checks. Whatever llmgw costs
 * above this is llmgw's own work. Run: `node -r tsx/cjs test/bench/bare-proxy.ts UPSTREAM`; prints {"ready":url}.
 */
import { Agent, createServer, request, type IncomingHttpHeaders } from 'node:http';

const upstream = new URL(process.argv[2] ?? 'http://127.0.0.1:8000');
const pool = new Agent({ keepAlive: true, maxFreeSockets: 1024, scheduling: 'lifo' });
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'];
const endToEnd = (h: IncomingHttpHeaders): IncomingHttpHeaders => {
  const out = { ...h };
  for (const name of HOP_BY_HOP) delete out[name];
  return out;
};

const server = createServer((req, res) => {
  const out = request(
    {
      agent: pool,
      host: upstream.hostname,
      port: upstream.port,
      method: req.method,
      path: req.url,
      headers: { ...endToEnd(req.headers), host: upstream.host },
    },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, endToEnd(answer.headers));
      answer.pipe(res);
    },
  );
  out.on('socket', (s) => s.setNoDelay(true));
  out.on('error', () => (res.headersSent ? res.destroy() : res.writeHead(502).end()));
  res.on('close', () => void (res.writableFinished || out.destroy())); // a client that left takes its upstream request along
  req.pipe(out);
});
server.on('connection', (s) => s.setNoDelay(true));
server.keepAliveTimeout = 75_000;
process.once('SIGTERM', () => process.exit(0)); // exits through Node's exit path (a --cpu-prof profile is written)
server.listen(0, '127.0.0.1', () => {
  const a = server.address();
  process.stdout.write(`${JSON.stringify({ ready: `http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}` })}\n`);
});
