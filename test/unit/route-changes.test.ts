/**
 * Pushed route changes, without the network: the routing table applies one change at a time and ends where a full
 * read of the same rows would; the control plane's route feed sends each change once, waits for an id a transaction
 * still holds (and sends it when it commits), gives up on one that never comes, and replays a new subscriber's
 * changes before the live ones it held meanwhile.
 */
import { RouteFeed } from '../../gateway/control/route-feed';
import type { RouteStreamLine } from '../../gateway/control/contract';
import type { RouteChange } from '../../lib/store/route-changes';
import type { RouteRows } from '../../lib/store/store';
import { ready, table } from '../helpers/gateway';

describe('routing table: incremental changes', () => {
  const snapshot = (t: ReturnType<typeof table>): unknown => ({
    routed: t.report().routed,
    counts: t.readyCounts(),
    models: t.models(),
    // Map order (which model came first) is not routing: compared by id.
    limits: t.limits().sort((a, b) => a.id.localeCompare(b.id)),
    m: t.pick('m'),
    emb: t.embeddingRefusal('e'),
    routing: [t.routingOf('m'), t.routingOf('e')],
  });

  it('ends where a full read of the same rows ends, change by change', async () => {
    let rows: RouteRows = { models: ['m'], replicas: [ready('m-1', 'm', 'http://127.0.0.1:9001')], cursor: 3 };
    const pushed = table(rows, { defaultLimit: 8 });
    await pushed.refresh();
    expect(pushed.changeCursor).toBe(3);
    const changes: RouteChange[] = [
      {
        kind: 'replica',
        seq: 4,
        id: 'm-0',
        model: 'm',
        replica: { state: 'ready', endpoint: 'http://127.0.0.1:9000', reason: null },
      },
      { kind: 'replica', seq: 5, id: 'm-2', model: 'm', replica: { state: 'starting', endpoint: null, reason: null } },
      {
        kind: 'model',
        seq: 6,
        model: 'e',
        routing: {
          maxConcurrent: 3,
          noEmbeddings: 'sim cannot embed',
          routing: { policy: 'prefix', prefixBytes: 512 },
        },
      },
      {
        kind: 'replica',
        seq: 7,
        id: 'e-0',
        model: 'e',
        replica: { state: 'ready', endpoint: 'http://127.0.0.1:9100', reason: null },
      },
      { kind: 'replica', seq: 8, id: 'm-1', model: 'm', replica: { state: 'stopped', endpoint: null, reason: null } },
      { kind: 'model', seq: 9, model: 'm', routing: { firstByteMs: 1234 } },
    ];
    for (const c of changes) pushed.apply(c);
    rows = {
      models: ['e', 'm'],
      replicas: [
        ready('e-0', 'e', 'http://127.0.0.1:9100'),
        ready('m-0', 'm', 'http://127.0.0.1:9000'),
        { id: 'm-2', model: 'm', state: 'starting', endpoint: null, reason: null },
      ],
      firstByteMs: { m: 1234 },
      maxConcurrent: { e: 3 },
      noEmbeddings: { e: 'sim cannot embed' },
      routing: { e: { policy: 'prefix', prefixBytes: 512 } },
      cursor: 9,
    };
    const full = table(rows, { defaultLimit: 8 });
    await full.refresh();
    expect(pushed.changeCursor).toBe(9);
    expect(snapshot(pushed)).toEqual(snapshot(full));
    expect(pushed.limits().sort((a, b) => a.id.localeCompare(b.id))).toEqual([
      { id: 'e-0', model: 'e', limit: 3 },
      { id: 'm-0', model: 'm', limit: 8 },
    ]);
    // A replica that moves endpoint is routed at the new one; a removed model with no replicas is gone.
    pushed.apply({
      kind: 'replica',
      seq: 10,
      id: 'm-0',
      model: 'm',
      replica: { state: 'ready', endpoint: 'http://127.0.0.1:9009', reason: null },
    });
    pushed.apply({ kind: 'replica', seq: 11, id: 'e-0', model: 'e', replica: null });
    pushed.apply({ kind: 'model', seq: 12, model: 'e', routing: null });
    expect(pushed.models()).toEqual(['m']);
    const picked = pushed.pick('m');
    expect(picked.kind === 'ok' && picked.replica.endpoint).toBe('http://127.0.0.1:9009');
    const none = pushed.pick('m', new Set(['m-0']));
    expect(none.kind).toBe('none-ready');
  });
});

describe('route feed', () => {
  /** A route_changes table in memory: ids taken (possibly uncommitted) and committed. */
  class Changes {
    committed = new Map<number, RouteChange>();
    async latest(): Promise<number> {
      return Math.max(0, ...this.committed.keys());
    }
    async oldest(): Promise<number | null> {
      return this.committed.size ? Math.min(...this.committed.keys()) : null;
    }
    async since(after: number, limit: number): Promise<RouteChange[]> {
      return [...this.committed.values()]
        .filter((c) => c.seq > after)
        .sort((a, b) => a.seq - b.seq)
        .slice(0, limit);
    }
    async prune(): Promise<number> {
      return 0;
    }
    commit(seq: number): void {
      this.committed.set(seq, { kind: 'replica', seq, id: `r-${seq}`, model: 'm', replica: null });
    }
  }
  const tick = (): Promise<void> => new Promise((r) => setTimeout(r, 5));

  it('sends each change once, waits for an uncommitted id, and gives up on one that never commits', async () => {
    const changes = new Changes();
    let now = 0;
    const logs: string[] = [];
    const feed = new RouteFeed({ changes, log: (m) => void logs.push(m), tailMs: 60_000, gapMs: 1000, now: () => now });
    await feed.start();
    const got: RouteStreamLine[] = [];
    await feed.subscribe(
      0,
      (l) => got.push(JSON.parse(l) as RouteStreamLine) > 0,
      () => undefined,
    );
    const seqs = (): number[] => got.flatMap((l) => (l.kind === 'change' ? [l.change.seq] : []));
    // 1 and 3 commit; 2 is taken by a transaction still open.
    changes.commit(1);
    changes.commit(3);
    feed.poke();
    await tick();
    expect(seqs()).toEqual([1, 3]);
    changes.commit(2);
    feed.poke();
    await tick();
    feed.poke();
    await tick();
    expect(seqs()).toEqual([1, 3, 2]);
    // 4 never commits: after gapMs the feed stops waiting, says so, and goes on.
    changes.commit(5);
    feed.poke();
    await tick();
    now += 1500;
    feed.poke();
    await tick();
    expect(seqs()).toEqual([1, 3, 2, 5]);
    expect(logs.filter((m) => /stopped waiting/.test(m))).toHaveLength(1);
    feed.stop();
  });

  it("replays a subscriber's changes after its cursor before live ones, and tells a cursor older than the kept changes to resync", async () => {
    const changes = new Changes();
    for (const s of [1, 2, 3]) changes.commit(s);
    const feed = new RouteFeed({ changes, log: () => undefined, tailMs: 60_000 });
    await feed.start();
    const got: RouteStreamLine[] = [];
    await feed.subscribe(
      1,
      (l) => got.push(JSON.parse(l) as RouteStreamLine) > 0,
      () => undefined,
    );
    expect(got[0]).toMatchObject({ kind: 'hello', cursor: 1 });
    expect(got.slice(1).map((l) => l.kind === 'change' && l.change.seq)).toEqual([2, 3]);
    changes.committed.delete(1);
    changes.committed.delete(2);
    const old: RouteStreamLine[] = [];
    await feed.subscribe(
      0,
      () => true,
      () => undefined,
    );
    await feed.subscribe(
      1,
      (l) => old.push(JSON.parse(l) as RouteStreamLine) > 0,
      () => undefined,
    );
    expect(old[1]).toMatchObject({ kind: 'resync' });
    feed.stop();
  });
});
