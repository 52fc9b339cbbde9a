/**
 * What keys and quotas add to the gateway's hot path: the same gateway without keys and with a stored key that
 * has rpm and tpm limits (the key table and the quota keeper as the role builds them, over in-memory sources:
 * the request path never touches MySQL, so MySQL is not what is measured), sequential requests interleaved in
 * one run against a sim engine process. Run: `node --import tsx test/bench/keys-overhead.ts [requests]`.
 */
import { spawn } from 'node:child_process';
import { Agent, request } from 'node:http';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { keyDigest, newApiKey } from '../../lib/api-keys';
import { stopProcess } from '../../lib/process';
import { simEngineArgv } from '../../lib/sim/argv';
import type { KeyRecord } from '../../lib/store/keys';
import { KeyTable } from '../../gateway/inference/keys';
import { QuotaKeeper } from '../../gateway/inference/quota';
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway } from '../../gateway/inference/server';

const MODEL = 'bench-model';
const N = Number(process.argv[2] ?? 4000);
const BODY = Buffer.from(
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 16 }),
);
const KEY = newApiKey();

function post(agent: Agent, base: string, auth: string | null): Promise<number> {
  const u = new URL('/v1/chat/completions', base);
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const headers: Record<string, string | number> = {
      'content-type': 'application/json',
      'content-length': BODY.length,
    };
    if (auth) headers.authorization = auth;
    const req = request({ agent, host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`${base} answered ${res.statusCode}`));
      res.resume();
      res.on('end', () => resolve(Number(process.hrtime.bigint() - t0) / 1e6));
    });
    req.on('error', reject);
    req.end(BODY);
  });
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

async function main(): Promise<void> {
  const port = await new Promise<number>((r) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as AddressInfo).port;
      s.close(() => r(p));
    });
  });
  const [bin, ...prefix] = simEngineArgv();
  const sim = spawn(bin as string, [...prefix, '--model', MODEL, '--port', String(port), '--tokens-per-second', '0'], {
    stdio: 'ignore',
  });
  const up = `http://127.0.0.1:${port}`;
  for (
    let i = 0;
    !(await fetch(`${up}/health`).then(
      (r) => r.ok,
      () => false,
    ));
    i++
  ) {
    if (i > 300) throw new Error('sim engine did not start');
    await new Promise((r) => setTimeout(r, 100));
  }
  const rows = { models: [MODEL], replicas: [{ id: 'r0', model: MODEL, state: 'ready', endpoint: up, reason: null }] };
  const plain = await startGateway({
    host: '127.0.0.1',
    port: 0,
    routing: new RoutingTable(async () => rows, { refreshMs: 60_000 }),
    apiKeys: [],
  });
  const record: KeyRecord = {
    id: 1,
    name: 'bench',
    digest: keyDigest(KEY),
    models: [MODEL],
    rpm: 1e9,
    tpm: 2e9,
    expiresAt: null,
    revoked: false,
  };
  const keys = new KeyTable(async () => ({ keys: [record], now: new Date() }), { refreshMs: 60_000 });
  const quota = new QuotaKeeper(
    {
      lease: async (a) => ({ requests: a.wantRequests, tokens: a.wantTokens, requestsLeft: 1e9, tokensLeft: 2e9 }),
      charge: async () => undefined,
      addUsage: async () => undefined,
      pruneQuota: async () => 0,
    },
    { flushMs: 60_000 },
  );
  const keyed = await startGateway({
    host: '127.0.0.1',
    port: 0,
    routing: new RoutingTable(async () => rows, { refreshMs: 60_000 }),
    apiKeys: [],
    keys,
    quota,
  });
  const a = new Agent({ keepAlive: true, maxSockets: 1 });
  const b = new Agent({ keepAlive: true, maxSockets: 1 });
  const auth = `Bearer ${KEY}`;
  try {
    for (let i = 0; i < 300; i++) {
      await post(a, plain.url, null);
      await post(b, keyed.url, auth);
    }
    const tPlain: number[] = [];
    const tKeyed: number[] = [];
    let cpuPlain = 0;
    let cpuKeyed = 0;
    const BLOCK = 100;
    for (let i = 0; i < N / BLOCK; i++) {
      for (const which of i % 2 ? ['keyed', 'plain'] : ['plain', 'keyed']) {
        const c0 = process.cpuUsage();
        for (let j = 0; j < BLOCK; j++)
          (which === 'plain' ? tPlain : tKeyed).push(
            await post(
              which === 'plain' ? a : b,
              which === 'plain' ? plain.url : keyed.url,
              which === 'plain' ? null : auth,
            ),
          );
        const c = process.cpuUsage(c0);
        if (which === 'plain') cpuPlain += c.user + c.system;
        else cpuKeyed += c.user + c.system;
      }
    }
    const n = tPlain.length;
    console.log(
      `keys + quota overhead, ${n} sequential requests per path, interleaved in blocks of ${BLOCK} (node ${process.version}):\n` +
        `  no keys         median ${median(tPlain).toFixed(3)} ms   CPU of this process ${(cpuPlain / n).toFixed(1)} µs/request\n` +
        `  key + rpm/tpm   median ${median(tKeyed).toFixed(3)} ms   CPU of this process ${(cpuKeyed / n).toFixed(1)} µs/request\n` +
        `  added           median ${(median(tKeyed) - median(tPlain)).toFixed(3)} ms   CPU ${((cpuKeyed - cpuPlain) / n).toFixed(1)} µs/request`,
    );
  } finally {
    a.destroy();
    b.destroy();
    await plain.close();
    await keyed.close();
    await stopProcess(sim, 5000);
  }
}

void main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
