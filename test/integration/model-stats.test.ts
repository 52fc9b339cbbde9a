/**
 * Model stats end to end in a real MariaDB: two gateways (two gateway ids) proxy requests to an engine whose first
 * token comes after ~150 ms and write their counts for the same minute; the writes are repeated (a retry) and the
 * hour still counts each request once; the cluster page's snapshot shows the requests and a TTFT p50 in the bucket
 * the engine's delay falls in.
 */
import type { Client } from '@temporalio/client';
import type { Pool } from 'mysql2/promise';
import { buildSnapshot } from '../../gateway/control/page/snapshot';
import { RecentTraffic, type ModelTraffic } from '../../gateway/control/page/traffic';
import { ModelStats } from '../../gateway/inference/model-stats';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import { StatsReporter } from '../../gateway/inference/stats-report';
import { openDatabase } from '../../lib/store/db';
import { ModelStatsStore } from '../../lib/store/model-stats';
import { Store } from '../../lib/store/store';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';
import { chat, chunk, closeAll, post, ready, sleep, table, upstream } from '../helpers/gateway';

const url = testMysqlUrl();
const MODEL = 'm';
let pool: Pool;
const running: RunningGateway[] = [];

beforeAll(async () => {
  pool = await openDatabase(url);
});
afterAll(async () => {
  await Promise.all(running.map((g) => g.close()));
  await closeAll();
  await pool?.end();
  await dropDatabase(url);
});

test('two gateways write the same minute, again and again: each request counts once, and the page shows them', async () => {
  // An engine whose stream sends its headers at once and its first token 150 ms later; TTFT is the token's.
  const engine = await upstream(async (_req, res, body) => {
    if (!(JSON.parse(body) as { stream?: boolean }).stream) return void res.writeHead(500).end('{}');
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    await sleep(150);
    res.end(`${chunk(MODEL, 'hi', 'stop')}data: [DONE]\n\n`);
  });
  const store = new ModelStatsStore(pool);
  const gateways = await Promise.all(
    ['gw-a', 'gw-b'].map(async (gatewayId) => {
      const stats = new ModelStats();
      const gw = await startGateway({
        host: '127.0.0.1',
        port: 0,
        routing: table({ models: [MODEL], replicas: [ready('m-0', MODEL, engine.endpoint)] }),
        apiKeys: [],
        stats,
      });
      running.push(gw);
      return { gw, stats, reporter: new StatsReporter({ stats, sink: store, gatewayId }) };
    }),
  );
  const [a, b] = gateways as [(typeof gateways)[0], (typeof gateways)[0]];
  const send = async (g: typeof a, stream: boolean): Promise<number> => {
    const res = await post(`${g.gw.url}/v1/chat/completions`, chat(MODEL, { stream }));
    await res.text();
    return res.status;
  };
  expect(await Promise.all([send(a, true), send(a, true), send(a, true), send(b, true), send(b, false)])).toEqual([
    200, 200, 200, 200, 500,
  ]);
  // The record is made when the response closes, a moment after the client has read it.
  await sleep(50);

  // Each reporter writes, then writes the same counts again (as after a retry or at its next period).
  for (const g of [a, b, a, b]) await g.reporter.tick();
  await store.write('gw-a', a.stats.pending());
  const [rows] = await pool.query('SELECT gateway_id, requests, errors_5xx FROM model_minute_stats ORDER BY 1');
  const perGateway = new Map<string, number>();
  for (const r of rows as { gateway_id: string; requests: number }[])
    perGateway.set(r.gateway_id, (perGateway.get(r.gateway_id) ?? 0) + r.requests);
  expect(Object.fromEntries(perGateway)).toEqual({ 'gw-a': 3, 'gw-b': 2 });

  const snap = await buildSnapshot(
    new Store(pool),
    { client: {} as Client, ui: { uiUrl: 'http://temporal.invalid', namespace: 'default' } },
    new RecentTraffic(store),
  );
  const traffic = snap.overview.traffic as ModelTraffic[];
  expect(traffic).toHaveLength(1);
  const t = traffic[0]!;
  expect(t).toMatchObject({ model: MODEL, requests: 5, errors5xx: 1, errors4xx: 0 });
  expect(t.rps.reduce((x, y) => x + y, 0)).toBeGreaterThan(0);
  // Four streams, each with its first token ~150 ms in: the (100, 250] bucket. The 500 has no TTFT of its own
  // (the gateway read it whole to judge it), so it does not pull the percentiles down.
  expect(t.ttftP50Ms).toBeGreaterThan(100);
  expect(t.ttftP50Ms).toBeLessThanOrEqual(250);
  expect(t.ttftP99Ms).toBeGreaterThanOrEqual(t.ttftP50Ms!);
  expect(t.ttftP99Ms).toBeLessThanOrEqual(250);

  // Rows older than two hours go; the hour's stay.
  await pool.query(
    `INSERT INTO model_minute_stats SELECT minute - INTERVAL 3 HOUR, model, gateway_id, requests, errors_5xx, errors_4xx,
       ttft_le_10, ttft_le_25, ttft_le_50, ttft_le_100, ttft_le_250, ttft_le_500, ttft_le_1000, ttft_le_2500,
       ttft_le_5000, ttft_le_10000, ttft_inf, updated_at FROM model_minute_stats`,
  );
  expect(await store.prune()).toBeGreaterThanOrEqual(2);
  expect((await store.recent()).reduce((n, r) => n + r.requests, 0)).toBe(5);
});
