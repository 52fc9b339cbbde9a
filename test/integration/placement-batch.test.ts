/**
 * Batched placement (activities/control/place-batch.ts) in a real MariaDB database of its own:
 * - a batch places every replica it has room for, each on GPUs and a port of its own, recorded in MySQL as returned;
 * - it respects capacity: GPUs held before the batch and by earlier replicas of the batch are not given again, and
 *   what does not fit is unplaceable with the reason;
 * - batches from two control planes (two pools) at once, and many placeReplica calls at once through the batcher,
 *   never double-book a GPU or a port, and the batcher places them in fewer lock holds than replicas.
 */
import type { Pool } from 'mysql2/promise';
import { placeBatch, placementBatcher, type BatchOutcome } from '../../activities/control/place-batch';
import type { PlaceInput, PlaceResult } from '../../activities/control';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import { parseNodeId, type NodeInventory, type Profile } from '../../lib/types';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';

const url = testMysqlUrl();
const ports = { base: 30_000, count: 20 };
const one: Profile = { name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: [] };
const pair: Profile = { name: 'tp2', engine: 'sim', nodes: 2, gpusPerNode: 1, args: [] };
let pools: Pool[] = [];
let store: Store;

function inventory(i: number, gpus: number): NodeInventory {
  return {
    gpus: Array.from({ length: gpus }, (_, index) => ({
      index,
      name: 'A100',
      memoryMiB: 81920,
      uuid: `GPU-${i}-${index}`,
    })),
    adapters: [],
    fabrics: { 'ib-0': ['mlx5_0'] },
    cpuFlags: [],
    engines: ['sim'],
    host: `127.9.0.${i + 1}`,
  };
}

/** `n` nodes of `gpus` GPUs each, named `<prefix>-<i>`, on hosts of their own. */
async function addNodes(prefix: string, n: number, gpus: number): Promise<void> {
  for (let i = 0; i < n; i++) await store.upsertNode(parseNodeId(`${prefix}-${i}`), inventory(i, gpus));
}

const input = (replicaId: string, profile: Profile = one): PlaceInput => ({
  replicaId,
  model: 'm',
  profile,
  exclude: [],
});

const placed = (outcomes: BatchOutcome[]): Extract<PlaceResult, { kind: 'placed' }>[] =>
  outcomes.flatMap((o) => (o.ok && o.result.kind === 'placed' ? [o.result] : []));

/** Every (node, GPU) and (host, port) held in MySQL by the replicas named, and whether any is held twice. */
async function holdings(prefix: string): Promise<{ gpus: string[]; ports: string[] }> {
  const shards = (await store.listShards()).filter((s) => s.nodeId.startsWith(prefix));
  const hostOf = new Map((await store.listNodes()).map((n) => [n.id as string, n.inventory.host]));
  return {
    gpus: shards.flatMap((s) => s.gpus.map((g) => `${s.nodeId}#${g}`)),
    ports: shards.map((s) => `${hostOf.get(s.nodeId)}:${s.port}`),
  };
}

beforeAll(async () => {
  pools = [await openDatabase(url), await openDatabase(url)];
  store = new Store(pools[0] as Pool);
});
// Each test's nodes are its own: the earlier tests' are cordoned (placement passes cordoned nodes by).
afterEach(async () => {
  for (const n of await store.listNodes()) await store.setNodeState(n.id, 'cordoned');
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()));
  await dropDatabase(url);
});

describe('placeBatch', () => {
  test('places each replica of a batch on GPUs and ports of its own, recorded in MySQL as returned', async () => {
    await addNodes('a', 4, 2);
    const outcomes = await placeBatch({ store, enginePorts: ports }, [
      ...Array.from({ length: 5 }, (_, k) => input(`a-r${k}`)),
      input('a-pair', pair),
    ]);
    expect(outcomes.every((o) => o.ok)).toBe(true);
    const results = placed(outcomes);
    expect(results).toHaveLength(6);
    const tp2 = results[5];
    expect(tp2?.shards).toHaveLength(2);
    expect(tp2?.distPort).toBeGreaterThan(0);
    const held = await holdings('a-');
    expect(held.gpus).toHaveLength(7);
    expect(new Set(held.gpus).size).toBe(7);
    expect(new Set(held.ports).size).toBe(held.ports.length);
    // What MySQL holds is what each replica was told.
    const shards = await store.listShards();
    for (const [k, r] of results.entries()) {
      const id = k < 5 ? `a-r${k}` : 'a-pair';
      expect(
        shards
          .filter((s) => s.replicaId === id)
          .map((s) => [s.rank, s.nodeId, s.port, s.gpus])
          .sort(),
      ).toEqual(r.shards.map((s) => [s.rank, s.nodeId, s.port, s.gpus]).sort());
    }
  });

  test('respects capacity: GPUs held before and by earlier replicas of the batch are not given again', async () => {
    await addNodes('b', 3, 2);
    // One GPU of b-0 is held by a replica placed before the batch.
    const before = await placeBatch({ store, enginePorts: ports }, [input('b-old')]);
    expect(placed(before)).toHaveLength(1);
    const outcomes = await placeBatch({ store, enginePorts: ports }, [
      ...Array.from({ length: 7 }, (_, k) => input(`b-r${k}`)),
    ]);
    // 6 GPUs, one held: 5 fit, 2 wait with the reason.
    expect(placed(outcomes)).toHaveLength(5);
    const refused = outcomes.flatMap((o) => (o.ok && o.result.kind === 'unplaceable' ? [o.result.reason] : []));
    expect(refused).toHaveLength(2);
    expect(refused[0]).toMatch(/no node can take m\/default .*0 of 1 GPUs free/);
    const held = await holdings('b-');
    expect(held.gpus).toHaveLength(6);
    expect(new Set(held.gpus).size).toBe(6);
  });

  test('two control planes placing batches at once never double-book a GPU or a port', async () => {
    await addNodes('c', 5, 2);
    const stores = pools.map((p) => new Store(p));
    // 12 replicas onto 10 GPUs from two pools (two control planes): the lock lets one batch read at a time.
    const [x, y] = await Promise.all(
      stores.map((s, side) =>
        placeBatch(
          { store: s, enginePorts: ports },
          Array.from({ length: 6 }, (_, k) => input(`c-${side}-${k}`)),
        ),
      ),
    );
    const results = [...placed(x ?? []), ...placed(y ?? [])];
    expect(results).toHaveLength(10);
    const held = await holdings('c-');
    expect(held.gpus).toHaveLength(10);
    expect(new Set(held.gpus).size).toBe(10);
    expect(new Set(held.ports).size).toBe(held.ports.length);
  });

  test('placeReplica calls arriving at once share lock holds, and none double-books', async () => {
    await addNodes('d', 10, 3);
    const batches: number[] = [];
    const place = placementBatcher({
      store,
      enginePorts: ports,
      log: (msg, f) => void (msg === 'placement batch' && batches.push(Number(f?.replicas))),
    });
    const results = await Promise.all(Array.from({ length: 30 }, (_, k) => place(input(`d-r${k}`))));
    expect(results.every((r) => r.kind === 'placed')).toBe(true);
    const held = await holdings('d-');
    expect(held.gpus).toHaveLength(30);
    expect(new Set(held.gpus).size).toBe(30);
    expect(new Set(held.ports).size).toBe(30);
    // The first call places alone (no call waits for company); the 29 that came while it held the lock go together.
    expect(batches.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(29);
    expect(batches.length).toBeLessThan(5);
  });
});
