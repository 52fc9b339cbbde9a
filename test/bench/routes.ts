/**
 * `npm run bench:routes`: how long from a replica's `ready` in MySQL until a gateway routes it. Two control planes'
 * HTTPS servers (each with its own MySQL pool, as two processes would have) and a gateway's routing table subscribed
 * to the first over mTLS with a gateway certificate; replicas are made ready (and then stopped) one at a time through
 * the first control plane's store (its own worker's write: pushed at once) and through the second's (read by the
 * first at its next tail of route_changes), and, for comparison, with push off (the table polling every 500 ms).
 * Prints p50/p90/p99/max in ms, from the write's start and from its commit. Asserts nothing.
 *
 *   npm run bench:routes [-- --replicas 200 --poll 40 --mysql mysql://root@127.0.0.1:3306]
 */
import '../helpers/bench-help'; // --help: the comment above
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import mysql from 'mysql2/promise';
import { createCaOperations } from '../../activities/ca';
import { buildControlServer } from '../../gateway/control/server';
import { RoutePush } from '../../gateway/inference/route-push';
import { RoutingTable } from '../../gateway/inference/routing';
import { initCa, issueServerCertificate } from '../../lib/pki';
import { openDatabase, parseMysqlUrl } from '../../lib/store/db';
import { Store } from '../../lib/store/store';

const MODEL = 'bench-m';

function quantiles(xs: number[]): string {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p: number): string => s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)].toFixed(1);
  return `${q(0.5)} | ${q(0.9)} | ${q(0.99)} | ${s[s.length - 1].toFixed(1)}`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      replicas: { type: 'string', default: '200' },
      poll: { type: 'string', default: '40' },
      mysql: { type: 'string', default: 'mysql://root@127.0.0.1:3306' },
    },
  });
  const n = Number(values.replicas);
  const pollN = Number(values.poll);
  const url = `${String(values.mysql).replace(/\/$/, '')}/llmgw_bench_routes_${process.pid}`;
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-routes-'));
  const pools: mysql.Pool[] = [];
  const closers: (() => Promise<void> | void)[] = [];
  try {
    const ca = initCa(join(dir, 'ca'), { keyBits: 2048 });
    const server = issueServerCertificate(ca, 'control-plane', ['127.0.0.1']);
    const cp = async (): Promise<{ store: Store; url: string }> => {
      const pool = await openDatabase(url);
      pools.push(pool);
      const store = new Store(pool);
      const { app } = await buildControlServer({
        store,
        tls: { caPem: ca.certPem, certPem: server.certPem, keyPem: server.keyPem },
        log: () => undefined,
        temporal: { address: '127.0.0.1:1', namespace: 'default' },
        heartbeatMs: 1000,
      });
      closers.push(() => app.close());
      return { store, url: await app.listen({ host: '127.0.0.1', port: 0 }) };
    };
    const a = await cp();
    const b = await cp();
    await a.store.upsertModel({
      name: MODEL,
      source: `sim://${MODEL}`,
      replicas: 1,
      profiles: [{ name: 'sim', engine: 'sim', nodes: 1, gpusPerNode: 1, args: [] }],
    });
    const gatewayCert = await createCaOperations({ caDir: join(dir, 'ca'), store: a.store }).issueClientCertificate({
      role: 'gateway',
      name: 'bench-gateway',
    });
    const gwPool = await openDatabase(url);
    pools.push(gwPool);
    const gwStore = new Store(gwPool);

    /** Times `n` replicas each made ready then stopped through `via`, until `table` routes (drops) it. */
    const run = async (
      table: RoutingTable,
      via: Store,
      count: number,
      tag: string,
      jitterMs = 0,
    ): Promise<{ fromWrite: number[]; fromCommit: number[]; gone: number[] }> => {
      let want: { id: string; present: boolean; done: (t: number) => void } | null = null;
      const check = (): void => {
        if (!want) return;
        const has = table.report().routed.includes(want.id);
        if (has === want.present) want.done(performance.now());
      };
      table.listen({ freed: () => undefined, refreshed: check });
      const out = { fromWrite: [] as number[], fromCommit: [] as number[], gone: [] as number[] };
      for (let i = 0; i < count; i++) {
        const id = `${MODEL}-${tag}-${i}`;
        for (const present of [true, false]) {
          // Polling: a write lands anywhere in the interval, not just after the refresh that ended the last sample.
          if (jitterMs) await new Promise((r) => setTimeout(r, Math.random() * jitterMs));
          const seen = new Promise<number>((resolve) => (want = { id, present, done: resolve }));
          const t0 = performance.now();
          await via.setReplica({
            id,
            model: MODEL,
            profile: 'sim',
            state: present ? 'ready' : 'stopped',
            endpoint: present ? `http://127.0.0.1:${20000 + i}` : null,
          });
          const t1 = performance.now();
          check();
          const t2 = await Promise.race([seen, new Promise<number>((r) => setTimeout(() => r(NaN), 5000))]);
          want = null;
          if (Number.isNaN(t2)) throw new Error(`${id} not ${present ? 'routed' : 'dropped'} within 5 s`);
          if (present) {
            out.fromWrite.push(t2 - t0);
            out.fromCommit.push(Math.max(0, t2 - t1));
          } else out.gone.push(t2 - t0);
        }
      }
      return out;
    };

    const pushed = new RoutingTable(() => gwStore.routeRows(), { refreshMs: 500 });
    const push = new RoutePush({
      table: pushed,
      urls: [a.url],
      tls: { caPem: ca.certPem, certPem: gatewayCert.certPem, keyPem: gatewayCert.keyPem },
      refreshMs: 500,
    });
    await push.start();
    closers.push(() => push.stop());
    for (let i = 0; i < 100 && push.source !== 'push'; i++) await new Promise((r) => setTimeout(r, 50));
    if (push.source !== 'push') throw new Error('the gateway table did not subscribe within 5 s');
    // Warm-up: connections, JIT.
    await run(pushed, a.store, 10, 'warm');
    const own = await run(pushed, a.store, n, 'own');
    const other = await run(pushed, b.store, n, 'other');

    const polled = new RoutingTable(() => gwStore.routeRows(), { refreshMs: 500 });
    await polled.start();
    closers.push(() => polled.stop());
    const poll = await run(polled, a.store, pollN, 'poll', 500);

    const load = (await import('node:os')).loadavg()[0].toFixed(1);
    const lines = [
      `ready → routable, ms (loadavg ${load}; gateway table, control planes and MySQL pools in this one process)`,
      '',
      '| path | samples | p50 | p90 | p99 | max |',
      '| --- | --- | --- | --- | --- | --- |',
      `| pushed, change by the subscribed control plane: from the write's start | ${n} | ${quantiles(own.fromWrite)} |`,
      `| … from its commit | ${n} | ${quantiles(own.fromCommit)} |`,
      `| pushed, change by another control plane: from the write's start | ${n} | ${quantiles(other.fromWrite)} |`,
      `| … from its commit | ${n} | ${quantiles(other.fromCommit)} |`,
      `| pushed: stopped → dropped, from the write's start (both) | ${2 * n} | ${quantiles([...own.gone, ...other.gone])} |`,
      `| polled every 500 ms (no push): from the write's start | ${pollN} | ${quantiles(poll.fromWrite)} |`,
      '',
      `push applied ${push.applied} changes; the write itself (a transaction: replica row + route_changes row) took p50 ${quantiles(own.fromWrite.map((w, i) => w - own.fromCommit[i])).split(' | ')[0]} ms`,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    for (const c of closers.reverse()) await c();
    for (const p of pools) await p.end().catch(() => undefined);
    const { options, database } = parseMysqlUrl(url);
    const admin = await mysql.createConnection(options);
    await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
