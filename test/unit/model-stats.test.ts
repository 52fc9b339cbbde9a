/**
 * The gateway's model stats: which TTFT bucket a request lands in, per-model counts, a minute's rollover (its
 * final counts kept until written, the current one rewritten), the reporter's writes, and percentiles read back
 * from summed buckets (interpolated inside a bucket), as the cluster page shows them.
 */
import { ModelStats } from '../../gateway/inference/model-stats';
import { StatsReporter } from '../../gateway/inference/stats-report';
import { trafficView, RecentTraffic } from '../../gateway/control/page/traffic';
import { TTFT_BUCKETS_MS, TTFT_SLOTS, ttftQuantile, ttftSlot } from '../../lib/stats/ttft';
import { TTFT_COLUMNS, type ModelMinute } from '../../lib/store/model-stats';
import { MIGRATIONS } from '../../lib/store/migrations';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import { chat, chunk, closeAll, post, ready, sleep, table, upstream } from '../helpers/gateway';

const T0 = Date.UTC(2026, 11, 4, 10, 0, 0);

const hist = (at: Record<number, number>): number[] => {
  const h = new Array<number>(TTFT_SLOTS).fill(0);
  for (const [i, n] of Object.entries(at)) h[Number(i)] = n;
  return h;
};

describe('TTFT buckets', () => {
  test('a TTFT lands in the first bucket whose bound is at least it, above 10 s in +Inf', () => {
    expect(ttftSlot(0)).toBe(0);
    expect(ttftSlot(10)).toBe(0);
    expect(ttftSlot(10.01)).toBe(1);
    expect(ttftSlot(99)).toBe(3);
    expect(ttftSlot(10_000)).toBe(9);
    expect(ttftSlot(10_001)).toBe(10);
  });

  test('percentiles interpolate inside the bucket the rank falls in', () => {
    // 100 answers: 50 in (25, 50], 50 in (50, 100].
    const h = hist({ 2: 50, 3: 50 });
    expect(ttftQuantile(h, 0.5)).toBe(50);
    expect(ttftQuantile(h, 0.25)).toBeCloseTo(37.5);
    expect(ttftQuantile(h, 0.99)).toBeCloseTo(99);
    // The first bucket starts at 0.
    expect(ttftQuantile(hist({ 0: 4 }), 0.5)).toBe(5);
    // Above the last bound the value is only known to be more than 10 s.
    expect(ttftQuantile(hist({ 0: 1, 10: 99 }), 0.99)).toBe(10_000);
    expect(ttftQuantile(hist({}), 0.5)).toBeNull();
  });

  test("the migration's columns are the buckets'", () => {
    const sql = MIGRATIONS.find((m) => m.version === 14)!.statements.join('\n');
    const cols = [...sql.matchAll(/\b(ttft_\w+) INT/g)].map((m) => m[1]);
    expect(cols).toEqual(TTFT_COLUMNS);
    expect(TTFT_COLUMNS).toHaveLength(TTFT_BUCKETS_MS.length + 1);
  });
});

describe('ModelStats', () => {
  test('counts requests, 5xx and 4xx, and TTFTs per model; a request without an answer byte has no TTFT', () => {
    const now = T0 + 5_000;
    const s = new ModelStats(() => now);
    s.record('a', 200, 7);
    s.record('a', 200, 30);
    s.record('a', 503, null);
    s.record('a', 499, null);
    s.record('b', 200, 20_000);
    const rows = s.pending();
    expect(rows).toHaveLength(2);
    const a = rows.find((r) => r.model === 'a')!;
    expect(a).toMatchObject({ minute: T0, final: false, requests: 4, errors5xx: 1, errors4xx: 1 });
    expect(Array.from(a.ttft)).toEqual(hist({ 0: 1, 2: 1 }));
    expect(Array.from(rows.find((r) => r.model === 'b')!.ttft)).toEqual(hist({ 10: 1 }));
  });

  test('a minute that ends keeps its final counts until written; the current one is rewritten with more', () => {
    let now = T0 + 59_000;
    const s = new ModelStats(() => now);
    s.record('a', 200, 5);
    const first = s.pending();
    s.written(first);
    // Written while current: still pending, and counting.
    s.record('a', 200, 5);
    now = T0 + 61_000;
    s.record('a', 200, 5);
    const rows = s.pending();
    expect(rows.map((r) => [r.minute, r.final, r.requests])).toEqual([
      [T0, true, 2],
      [T0 + 60_000, false, 1],
    ]);
    // A write that fails leaves them; one that succeeds ends the finished minute.
    s.written(rows);
    expect(s.pending().map((r) => [r.minute, r.requests])).toEqual([[T0 + 60_000, 1]]);
  });

  test('a minute that ended between reading and writing is written once more with its final counts', () => {
    let now = T0 + 59_000;
    const s = new ModelStats(() => now);
    s.record('a', 200, 5);
    const rows = s.pending();
    now = T0 + 60_500;
    s.written(rows); // the write of the (then current) minute lands after it ended
    expect(s.pending()).toMatchObject([{ minute: T0, final: true, requests: 1 }]);
  });

  test('while nothing can be written, only the last few finished minutes are kept', () => {
    let now = T0;
    const s = new ModelStats(() => now);
    for (let m = 0; m < 6; m++) {
      now = T0 + m * 60_000;
      s.record('a', 200, 5);
    }
    expect(s.pending().map((r) => (r.minute - T0) / 60_000)).toEqual([2, 3, 4, 5]);
    expect(s.dropped).toBe(2);
  });
});

describe('StatsReporter', () => {
  test('writes cumulative rows, ends finished minutes only once written, and logs an outage once', async () => {
    let now = T0 + 10_000;
    const stats = new ModelStats(() => now);
    const writes: ModelMinute[][] = [];
    let fail = false;
    const logs: string[] = [];
    const reporter = new StatsReporter({
      stats,
      gatewayId: 'gw-1',
      sink: {
        async write(_id, rows) {
          if (fail) throw new Error('MySQL is down');
          writes.push([...rows]);
        },
        prune: async () => 0,
      },
      log: (msg) => logs.push(msg),
    });
    stats.record('a', 200, 5);
    await reporter.tick();
    stats.record('a', 200, 5);
    fail = true;
    now = T0 + 70_000;
    await reporter.tick();
    await reporter.tick();
    expect(logs).toEqual(['model stats not written; the cluster page misses this gateway until they are']);
    fail = false;
    await reporter.stop();
    expect(writes.map((w) => w.map((r) => [r.minute - T0, r.requests]))).toEqual([[[0, 1]], [[0, 2]]]);
    expect(logs[1]).toBe('model stats written again');
    expect(stats.pending()).toEqual([]);
  });
});

describe('the overview traffic figures', () => {
  const row = (minute: number, model: string, requests: number, ttft: Record<number, number>): ModelMinute => ({
    minute,
    model,
    requests,
    errors5xx: 0,
    errors4xx: 0,
    ttft: hist(ttft),
  });

  test('requests/s per minute over the hour and p50/p99 from the summed buckets; a catalog model without requests is empty', () => {
    const now = T0 + 30_000; // half-way through the minute starting at T0
    const view = trafficView(
      [
        row(T0 - 60 * 60_000, 'a', 999, { 0: 999 }), // an hour and a minute ago: out of the window
        row(T0 - 2 * 60_000, 'a', 120, { 2: 60, 3: 60 }),
        row(T0, 'a', 60, { 3: 60 }),
      ],
      ['a', 'idle'],
      now,
    );
    expect(view.map((v) => v.model)).toEqual(['a', 'idle']);
    const a = view[0]!;
    expect(a.rps).toHaveLength(60);
    expect(a.rps[57]).toBe(2); // 120 in a whole minute
    expect(a.rps[59]).toBe(2); // 60 in the 30 s the current minute has run
    expect(a.rps.filter((x) => x > 0)).toHaveLength(2);
    expect(a.requests).toBe(180);
    expect(a.since).toBe(new Date(T0 - 59 * 60_000).toISOString());
    // 60 in (25, 50] and 120 in (50, 100]: the median is the 90th, 30 into the second bucket of 120.
    expect(a.ttftP50Ms).toBeCloseTo(50 + 50 * (30 / 120), 1);
    expect(a.ttftP99Ms).toBeCloseTo(50 + 50 * ((0.99 * 180 - 60) / 120), 1);
    expect(a.p50PerMinute[57]).toBe(50);
    expect(view[1]).toMatchObject({ requests: 0, ttftP50Ms: null, ttftP99Ms: null });
  });

  test('the rows are read at most once per period', async () => {
    let reads = 0;
    const traffic = new RecentTraffic(
      {
        recent: async () => {
          reads++;
          return [];
        },
      },
      10_000,
    );
    await traffic.view([], T0);
    await traffic.view([], T0 + 9_000);
    expect(reads).toBe(1);
    await traffic.view([], T0 + 10_000);
    expect(reads).toBe(2);
  });
});

describe("the proxy's hook", () => {
  let gw: RunningGateway | null = null;
  afterEach(async () => {
    await gw?.close();
    gw = null;
    await closeAll();
  });
  const start = async (endpoint: string): Promise<{ url: string; stats: ModelStats }> => {
    const stats = new ModelStats();
    gw = await startGateway({
      host: '127.0.0.1',
      port: 0,
      routing: table({ models: ['m'], replicas: [ready('m-0', 'm', endpoint)] }),
      apiKeys: [],
      stats,
      timeouts: { connectMs: 500, firstByteMs: 2000, idleMs: 2000, requestMs: 5000 },
      // An aborted fetch leaves its connection to the gateway open a while: close() need not wait long for it.
      closeGraceMs: 200,
    });
    return { url: gw.url, stats };
  };
  const ttftSlots = (stats: ModelStats): number[] => Array.from(stats.pending()[0]?.ttft ?? []);

  test("a stream's TTFT is its first event's, not its headers'", async () => {
    const engine = await upstream(async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders();
      await sleep(120);
      res.end(`${chunk('m', 'hi', 'stop')}data: [DONE]\n\n`);
    });
    const { url, stats } = await start(engine.endpoint);
    const res = await post(`${url}/v1/chat/completions`, chat('m', { stream: true }));
    await res.text();
    await sleep(20);
    expect(stats.pending()).toMatchObject([{ model: 'm', requests: 1, errors5xx: 0, errors4xx: 0 }]);
    expect(ttftSlots(stats)).toEqual(hist({ 4: 1 })); // (100, 250] ms
  });

  test('a client that leaves before any answer counts as 499 without a TTFT; a failed replica as 502 without one', async () => {
    const slow = await upstream(async (_req, res) => {
      await sleep(1000);
      res.end('{}');
    });
    const { url, stats } = await start(slow.endpoint);
    const ctl = new AbortController();
    const req = post(`${url}/v1/chat/completions`, chat('m'), { signal: ctl.signal }).catch(() => null);
    await sleep(100);
    ctl.abort();
    await req;
    await sleep(50);
    expect(stats.pending()).toMatchObject([{ requests: 1, errors4xx: 1, errors5xx: 0 }]);
    expect(ttftSlots(stats)).toEqual(hist({}));
    await gw!.close();

    // Nothing listens there: the gateway answers 502 itself.
    const dead = await start('http://127.0.0.1:1');
    expect((await post(`${dead.url}/v1/chat/completions`, chat('m'))).status).toBe(502);
    await sleep(20);
    expect(dead.stats.pending()).toMatchObject([{ requests: 1, errors5xx: 1 }]);
    expect(ttftSlots(dead.stats)).toEqual(hist({}));
  });
});
