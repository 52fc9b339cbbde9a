/**
 * What mutual TLS costs an agent's registration: a new connection (TCP + TLS 1.3 handshake with client
 * certificate, the gate's certificate check and its MySQL lookup) plus POST /v1/agent/register, against the
 * same registration on a connection already open. Real control plane app over HTTPS on loopback, real MariaDB.
 * Run: `npm run bench:mtls`. Not a test: figures, not assertions.
 */
import '../helpers/bench-help'; // --help: the comment above
import { readFileSync } from 'node:fs';
import { Agent, fetch } from 'undici';
import { buildControlServer } from '../../gateway/control/server';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';
import { simInventory } from '../helpers/node-workers';
import { certClient, closeCertClients, testTls } from '../helpers/tls';

const N = Number(process.env.N ?? 200);

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((s.length * p) / 100))] ?? NaN;
};

async function main(): Promise<void> {
  const mysqlUrl = testMysqlUrl();
  const pool = await openDatabase(mysqlUrl);
  const store = new Store(pool);
  const config = { tls: testTls({ caKeyBits: 3072 }) }; // the size llmgw ca init makes
  const read = (f: string): string => readFileSync(f, 'utf8');
  const { app } = await buildControlServer({
    store,
    tls: { caPem: read(config.tls.ca), certPem: read(config.tls.serverCert), keyPem: read(config.tls.serverKey) },
    log: () => undefined,
    temporal: { address: '127.0.0.1:7233', namespace: 'default' },
    heartbeatMs: 2000,
  });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  const { cert } = await certClient(config, store, 'bench-01');
  const body = JSON.stringify({ nodeId: 'bench-01', inventory: simInventory({ gpus: 8 }) });
  const register = async (dispatcher: Agent): Promise<number> => {
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/agent/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
      dispatcher,
    });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`register answered ${res.status}`);
    return performance.now() - t0;
  };
  const connect = { cert: cert.certPem, key: cert.keyPem, ca: cert.caPem };

  const fresh: number[] = [];
  const warm: number[] = [];
  const kept = new Agent({ connect });
  for (let i = 0; i < 20; i++) await register(kept); // JIT, MySQL connections
  for (let i = 0; i < N; i++) {
    const a = new Agent({ connect, pipelining: 0 });
    fresh.push(await register(a));
    await a.destroy();
    warm.push(await register(kept));
  }
  const line = (name: string, xs: number[]): string =>
    `${name.padEnd(44)} median ${pct(xs, 50).toFixed(2)} ms   p90 ${pct(xs, 90).toFixed(2)} ms`;
  console.log(`mTLS registration, ${N} rounds (interleaved), loopback, RSA-2048 node and server keys, RSA-3072 CA`);
  console.log(line('new connection: TLS handshake + register', fresh));
  console.log(line('open connection: register only', warm));
  console.log(
    `${'handshake + gate (difference of medians)'.padEnd(44)} ${(pct(fresh, 50) - pct(warm, 50)).toFixed(2)} ms`,
  );
  await kept.destroy();
  await closeCertClients();
  await app.close();
  await pool.end();
  await dropDatabase(mysqlUrl);
}

main().catch((err: Error) => {
  console.error(err);
  process.exit(1);
});
