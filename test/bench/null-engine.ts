/**
 * An engine that does no work, for `bench:routing`'s 220 KB case: it reads each request's body and answers one
 * fixed chat completion, so what is measured is the gateway in front of it. Prints {"ready":url}; SIGTERM ends it.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const ANSWER = JSON.stringify({
  id: 'chatcmpl-null',
  object: 'chat.completion',
  created: 0,
  model: 'null',
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
});

const server = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    if (req.method !== 'POST') return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(ANSWER) }).end(ANSWER);
  });
});
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`${JSON.stringify({ ready: `http://127.0.0.1:${port}` })}\n`);
});
process.once('SIGTERM', () => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
});
