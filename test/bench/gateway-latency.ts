/**
 * Latency the gateway adds: sequential non-streamed chat completions, direct to an engine and through the gateway,
 * interleaved in one run. Run: `npm run bench` (or `node --import tsx test/bench/gateway-latency.ts [requests]`).
 * The client and the gateway share one process; the sim engine runs as its own, so the figure is the
 * gateway's own work plus its extra hop over loopback.
 */
import '../helpers/bench-help'; // --help: the comment above
import { spawn } from 'node:child_process';
import { Agent, request } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway } from '../../gateway/inference/server';
import { stopProcess } from '../../lib/process';
import { simEngineArgv } from '../../lib/sim/argv';

const MODEL = 'bench-model';
const N = Number(process.argv[2] ?? 1000);
const WARMUP = 200;
const BODY = Buffer.from(
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello in five words.' }], max_tokens: 16 }),
);

/** The upstream: the sim engine as its own process, as engines run in production (its GC is not the gateway's). */
async function startUpstream(): Promise<{ url: string; kind: string; close(): Promise<void> }> {
  const port = await new Promise<number>((r) => {
    const probe = createNetServer().listen(0, '127.0.0.1', () => {
      const p = (probe.address() as AddressInfo).port;
      probe.close(() => r(p));
    });
  });
  const [bin, ...prefix] = simEngineArgv();
  const child = spawn(
    bin as string,
    [...prefix, '--model', MODEL, '--port', String(port), '--tokens-per-second', '0'],
    { stdio: 'ignore' },
  );
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`sim engine exited with code ${child.exitCode}`);
    if (
      await fetch(`${url}/health`).then(
        (r) => r.ok,
        () => false,
      )
    )
      break;
    if (i > 300) throw new Error('sim engine did not answer /health within 30 s');
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, kind: 'sim engine process', close: () => stopProcess(child, 5000) };
}

/** One POST over `agent`; resolves with the elapsed milliseconds once the whole body is in. */
function timedPost(agent: Agent, base: string): Promise<number> {
  const url = new URL('/v1/chat/completions', base);
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const req = request(
      {
        agent,
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': BODY.length },
      },
      (res) => {
        if (res.statusCode !== 200) reject(new Error(`${base} answered ${res.statusCode}`));
        res.resume();
        res.on('end', () => resolve(Number(process.hrtime.bigint() - t0) / 1e6));
      },
    );
    req.on('socket', (s) => s.setNoDelay(true));
    req.on('error', reject);
    req.end(BODY);
  });
}

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
};
const f3 = (x: number): string => x.toFixed(3);

async function main(): Promise<void> {
  const up = await startUpstream();
  const routing = new RoutingTable(
    async () => ({
      models: [MODEL],
      replicas: [{ id: `${MODEL}-0`, model: MODEL, state: 'ready', endpoint: up.url, reason: null }],
    }),
    { refreshMs: 60_000 },
  );
  const gw = await startGateway({ host: '127.0.0.1', port: 0, routing, apiKeys: [] });
  // One keep-alive agent per path, as a client library would hold.
  const directAgent = new Agent({ keepAlive: true, maxSockets: 1 });
  const gwAgent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    for (let i = 0; i < WARMUP; i++) {
      await timedPost(directAgent, up.url);
      await timedPost(gwAgent, gw.url);
    }
    const direct: number[] = [];
    const viaGw: number[] = [];
    for (let i = 0; i < N; i++) {
      // Alternate which path goes first so drift (GC, CPU frequency) lands on both.
      if (i % 2 === 0) {
        direct.push(await timedPost(directAgent, up.url));
        viaGw.push(await timedPost(gwAgent, gw.url));
      } else {
        viaGw.push(await timedPost(gwAgent, gw.url));
        direct.push(await timedPost(directAgent, up.url));
      }
    }
    const added = viaGw.map((g, i) => g - direct[i]);
    const r = {
      requests: N,
      upstream: up.kind,
      node: process.version,
      direct: { median: quantile(direct, 0.5), p90: quantile(direct, 0.9), p99: quantile(direct, 0.99) },
      gateway: { median: quantile(viaGw, 0.5), p90: quantile(viaGw, 0.9), p99: quantile(viaGw, 0.99) },
      added: {
        median: quantile(added, 0.5),
        p90: quantile(added, 0.9),
        p99: quantile(added, 0.99),
        medianOfMedians: quantile(viaGw, 0.5) - quantile(direct, 0.5),
      },
    };
    console.log(
      [
        `gateway latency: ${N} sequential non-streamed chat completions per path, interleaved (upstream: ${up.kind}, node ${process.version})`,
        `  direct         median ${f3(r.direct.median)} ms   p90 ${f3(r.direct.p90)} ms   p99 ${f3(r.direct.p99)} ms`,
        `  via gateway    median ${f3(r.gateway.median)} ms   p90 ${f3(r.gateway.p90)} ms   p99 ${f3(r.gateway.p99)} ms`,
        `  added (paired) median ${f3(r.added.median)} ms   p90 ${f3(r.added.p90)} ms   p99 ${f3(r.added.p99)} ms   (difference of medians ${f3(r.added.medianOfMedians)} ms)`,
      ].join('\n'),
    );
    const round = (o: { median: number; p90: number; p99: number }): { median: number; p90: number; p99: number } => ({
      median: +f3(o.median),
      p90: +f3(o.p90),
      p99: +f3(o.p99),
    });
    console.log(
      JSON.stringify({
        ...r,
        direct: round(r.direct),
        gateway: round(r.gateway),
        added: { ...round(r.added), medianOfMedians: +f3(r.added.medianOfMedians) },
      }),
    );
  } finally {
    directAgent.destroy();
    gwAgent.destroy();
    await gw.close();
    await up.close();
  }
}

main().catch((err: Error) => {
  console.error(`bench failed: ${err.message}`);
  process.exit(1);
});
