/**
 * What a JSON nesting bomb costs the gateway: 10 MB bodies of nested arrays (`{"model":"m","messages":[[[[…]]]]}`)
 * sent to a gateway in a process of its own while this process times `GET /health` on the same gateway every
 * 10 ms. Prints each bomb's answer and time, /health's latency before and while bombs were in flight, the gateway
 * process's longest event-loop stall (perf_hooks' monitorEventLoopDelay), and whether a bomb reached the engine. Run:
 *
 *   npm run bench:bomb [-- BOMBS [MEGABYTES]]
 */
import '../helpers/bench-help'; // --help: the comment above
import { fork } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway } from '../../gateway/inference/server';

const BOMBS = Number(process.argv[2] ?? 5);
const MB = Number(process.argv[3] ?? 10);

/** The gateway's process: a gateway over one fake engine that counts the requests reaching it. */
async function serve(): Promise<void> {
  let hits = 0;
  const loop = monitorEventLoopDelay({ resolution: 5 });
  const engine = createServer((req, res) => {
    if (req.url === '/loop/reset') {
      loop.reset();
      loop.enable();
    } else if (req.url !== '/hits') hits++;
    req.resume();
    req.on('end', () =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ hits, stallMs: loop.max / 1e6 })),
    );
  });
  await new Promise<void>((r) => engine.listen(0, '127.0.0.1', r));
  const endpoint = `http://127.0.0.1:${(engine.address() as AddressInfo).port}`;
  const routing = new RoutingTable(
    async () => ({ models: ['m'], replicas: [{ id: 'm-0', model: 'm', state: 'ready', endpoint, reason: null }] }),
    { refreshMs: 60_000 },
  );
  const gw = await startGateway({ host: '127.0.0.1', port: 0, routing, apiKeys: [] });
  process.send?.({ url: gw.url, engine: endpoint });
}

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] ?? NaN;
};

async function main(): Promise<void> {
  const child = fork(__filename, ['--serve'], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  try {
    const { url, engine } = await new Promise<{ url: string; engine: string }>((resolve, reject) => {
      child.once('message', (m) => resolve(m as { url: string; engine: string }));
      child.once('exit', (code) => reject(new Error(`the gateway process exited (${code})`)));
    });
    const depth = Math.floor((MB * 1024 * 1024 - 30) / 2);
    const bomb = `{"model":"m","messages":${'['.repeat(depth)}${']'.repeat(depth)}}`;
    const timeHealth = async (): Promise<number> => {
      const t0 = performance.now();
      await fetch(`${url}/health`).then((r) => r.arrayBuffer());
      return performance.now() - t0;
    };
    const idle: number[] = [];
    for (let i = 0; i < 50; i++) {
      idle.push(await timeHealth());
      await new Promise((r) => setTimeout(r, 10));
    }
    await fetch(`${engine}/loop/reset`);
    const health: number[] = [];
    let running = true;
    const poll = (async (): Promise<void> => {
      while (running) {
        health.push(await timeHealth());
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const answers: string[] = [];
    for (let i = 0; i < BOMBS; i++) {
      const t0 = performance.now();
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: bomb,
      });
      const text = await r.text();
      answers.push(`${r.status} in ${(performance.now() - t0).toFixed(0)} ms: ${text.slice(0, 160)}`);
    }
    running = false;
    await poll;
    const { hits, stallMs } = (await (await fetch(`${engine}/hits`)).json()) as { hits: number; stallMs: number };
    const stats = (xs: number[]): string =>
      `median ${quantile(xs, 0.5).toFixed(1)} ms, p99 ${quantile(xs, 0.99).toFixed(1)} ms, worst ${Math.max(...xs).toFixed(1)} ms`;
    console.log(
      [
        `JSON nesting bomb: ${BOMBS} bodies of ${(bomb.length / 1e6).toFixed(1)} MB (depth ${depth}) to a gateway in its own process`,
        ...answers.map((a, i) => `  bomb ${i + 1}: ${a}`),
        `  GET /health before the bombs: ${idle.length} requests, ${stats(idle)}`,
        `  GET /health meanwhile: ${health.length} requests, ${stats(health)}`,
        `  the gateway's longest event-loop stall while bombs came: ${stallMs.toFixed(1)} ms`,
        `  bombs that reached the engine: ${hits}`,
      ].join('\n'),
    );
  } finally {
    child.kill('SIGKILL');
  }
}

if (process.argv.includes('--serve')) void serve();
else
  main().catch((err: Error) => {
    console.error(`bench failed: ${err.message}`);
    process.exit(1);
  });
