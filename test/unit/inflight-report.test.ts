/**
 * The gateway's in-flight report: what the routing table reports, when the reporter writes it (changes, anything
 * in flight, a heartbeat when idle), that it never writes twice at once, and how a stopping replica reads it.
 */
import { InflightReporter, type ReportSink } from '../../gateway/inference/inflight-report';
import { RoutingTable } from '../../gateway/inference/routing';
import { holdersOf, lagsOf, type GatewayReport, type LiveReport } from '../../lib/store/drain';

/** A sink that records reports; `gate` holds each write until released. */
function fakeSink(): ReportSink & {
  writes: GatewayReport[];
  forgotten: string[];
  fail: boolean;
  gate: Promise<void> | null;
} {
  const s = {
    writes: [] as GatewayReport[],
    forgotten: [] as string[],
    fail: false,
    gate: null as Promise<void> | null,
    async report(_id: string, r: GatewayReport): Promise<void> {
      if (s.gate) await s.gate;
      if (s.fail) throw new Error('MySQL is down');
      s.writes.push(JSON.parse(JSON.stringify(r)) as GatewayReport);
    },
    async forget(id: string): Promise<void> {
      s.forgotten.push(id);
    },
  };
  return s;
}

const table = async (): Promise<RoutingTable> => {
  const t = new RoutingTable(
    async () => ({
      models: ['m'],
      replicas: [
        { id: 'm-0', model: 'm', state: 'ready', endpoint: 'http://127.0.0.1:1', reason: null },
        { id: 'm-1', model: 'm', state: 'stopping', endpoint: 'http://127.0.0.1:2', reason: null },
      ],
    }),
    { refreshMs: 60_000 },
  );
  await t.refresh();
  return t;
};

describe('RoutingTable.report', () => {
  test('lists the routed (ready) replicas and the requests in flight per replica, zeros left out', async () => {
    const t = await table();
    t.acquire('m-0');
    t.acquire('m-0');
    t.acquire('m-1'); // a request that started before m-1 left routing
    expect(t.report()).toEqual({ routed: ['m-0'], inflight: { 'm-0': 2, 'm-1': 1 } });
    t.release('m-1');
    expect(t.report()).toEqual({ routed: ['m-0'], inflight: { 'm-0': 2 } });
  });
});

describe('InflightReporter', () => {
  test('writes at start, skips an unchanged idle report until the heartbeat, writes every tick while requests are in flight', async () => {
    const t = await table();
    const sink = fakeSink();
    const r = new InflightReporter({ source: t, sink, gatewayId: 'gw-1', heartbeatMs: 60_000 });
    await r.tick();
    await r.tick();
    expect(sink.writes).toEqual([{ routed: ['m-0'], inflight: {} }]);
    t.acquire('m-0');
    await r.tick();
    await r.tick(); // unchanged, but in flight: the row must stay live
    expect(sink.writes).toHaveLength(3);
    t.release('m-0');
    await r.tick();
    await r.tick();
    expect(sink.writes.at(-1)).toEqual({ routed: ['m-0'], inflight: {} });
    expect(sink.writes).toHaveLength(4);

    const beat = new InflightReporter({ source: t, sink, gatewayId: 'gw-2', heartbeatMs: 0 });
    await beat.tick();
    await beat.tick();
    expect(sink.writes).toHaveLength(6);
  });

  test('never has two writes under way: a tick during a slow write waits for it', async () => {
    const t = await table();
    const sink = fakeSink();
    let release = (): void => undefined;
    sink.gate = new Promise<void>((r) => (release = r));
    const r = new InflightReporter({ source: t, sink, gatewayId: 'gw-1' });
    const first = r.tick();
    t.acquire('m-0');
    const second = r.tick();
    expect(second).toBe(first);
    release();
    await Promise.all([first, second]);
    expect(sink.writes).toHaveLength(1);
  });

  test('poke() writes a change at once, not at the next period; one during a write writes again after it; none before start', async () => {
    const t = await table();
    const sink = fakeSink();
    const r = new InflightReporter({ source: t, sink, gatewayId: 'gw-1', periodMs: 60_000, heartbeatMs: 60_000 });
    r.poke();
    await new Promise((res) => setImmediate(res));
    expect(sink.writes).toHaveLength(0);
    let release = (): void => undefined;
    sink.gate = new Promise<void>((res) => (release = res));
    r.start();
    t.acquire('m-0');
    r.poke(); // the start's write is under way: this one waits for it, then writes what changed
    sink.gate = null;
    release();
    for (let i = 0; i < 10 && sink.writes.length < 2; i++) await new Promise((res) => setImmediate(res));
    expect(sink.writes).toEqual([
      { routed: ['m-0'], inflight: {} },
      { routed: ['m-0'], inflight: { 'm-0': 1 } },
    ]);
    await r.stop();
  });

  test('a failing write is logged once per outage and retried at the next tick; stop() removes the row', async () => {
    const t = await table();
    const sink = fakeSink();
    const logs: string[] = [];
    const r = new InflightReporter({ source: t, sink, gatewayId: 'gw-1', log: (m) => logs.push(m) });
    sink.fail = true;
    await r.tick();
    await r.tick();
    expect(logs).toEqual([expect.stringMatching(/in-flight report failed/)]);
    sink.fail = false;
    await r.tick();
    expect(sink.writes).toHaveLength(1);
    expect(logs).toHaveLength(2);
    await r.stop();
    expect(sink.forgotten).toEqual(['gw-1']);
  });
});

describe('lagsOf', () => {
  test('names, for each live gateway, the ready replicas its report does not route', () => {
    const reports: LiveReport[] = [
      { gatewayId: 'a', ageMs: 100, routed: ['m-0', 'm-1'], inflight: {} },
      { gatewayId: 'b', ageMs: 200, routed: ['m-0'], inflight: {} },
    ];
    expect(lagsOf(reports, ['m-0', 'm-1'])).toEqual([
      { gatewayId: 'a', ageMs: 100, missing: [] },
      { gatewayId: 'b', ageMs: 200, missing: ['m-1'] },
    ]);
    expect(lagsOf([], ['m-0'])).toEqual([]);
  });
});

describe('holdersOf', () => {
  test('a replica is held by every live gateway that still routes it or has a request on it', () => {
    const reports: LiveReport[] = [
      { gatewayId: 'a', ageMs: 100, routed: ['m-0', 'm-1'], inflight: {} },
      { gatewayId: 'b', ageMs: 200, routed: ['m-0'], inflight: { 'm-1': 3 } },
      { gatewayId: 'c', ageMs: 300, routed: ['m-0'], inflight: { 'm-0': 1 } },
    ];
    expect(holdersOf(reports, 'm-1')).toEqual({ inFlight: 3, gateways: ['a', 'b'] });
    expect(holdersOf(reports, 'm-2')).toEqual({ inFlight: 0, gateways: [] });
  });
});
