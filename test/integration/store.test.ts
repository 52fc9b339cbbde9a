/**
 * The store in a real MariaDB database of its own.
 * - Engine port leases: a released port is not handed out again while ports released longer ago (or never
 *   leased) are free, so a stale route or an engine still stopping never shares its port with a new engine on
 *   that host; the range still fills up completely, and an exhausted range says how to widen it.
 * - Node state: a cordon is the operator's and outlives the node going down (the sweeper) and coming back (a
 *   heartbeat or a new registration); uncordoning a down node leaves it down until it is seen.
 * - Routing rows: a model's first-byte timeout reaches the gateway from the spec it was stored with.
 * - Ready marks: a health wait marks its replica ready only while it is still starting on the same placement.
 */
import type { Pool } from 'mysql2/promise';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import type { NodeId, NodeInventory } from '../../lib/types';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';

const url = testMysqlUrl();
let pool: Pool;
let store: Store;
const range = { base: 40_000, count: 4 };
const inv: NodeInventory = { gpus: [], adapters: [], fabrics: {}, cpuFlags: [], engines: ['sim'], host: '127.0.0.1' };
const id = (s: string): NodeId => s as NodeId;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  pool = await openDatabase(url);
  store = new Store(pool);
});
afterAll(async () => {
  await pool?.end();
  await dropDatabase(url);
});

describe('engine port leases', () => {
  test('ports never leased go first, then the one released longest ago; a just-released port comes last', async () => {
    expect(await store.leasePorts('h1', 'r-0', 2, range)).toEqual([40_000, 40_001]);
    await store.releaseReplica('r-0');
    // 40000 and 40001 were just released: the never-leased ones go first.
    expect(await store.leasePorts('h1', 'r-1', 1, range)).toEqual([40_002]);
    expect(await store.leasePorts('h1', 'r-2', 1, range)).toEqual([40_003]);
    await new Promise((r) => setTimeout(r, 20));
    await store.releaseReplica('r-1'); // 40002 released after 40000/40001
    expect(await store.leasePorts('h1', 'r-3', 2, range)).toEqual([40_000, 40_001]);
    expect(await store.leasePorts('h1', 'r-4', 1, range)).toEqual([40_002]);
    // Other hosts have ranges of their own.
    expect(await store.leasePorts('h2', 'r-5', 1, range)).toEqual([40_000]);
  });

  test('a full range is refused with the fix, and the refusal leases nothing', async () => {
    await expect(store.leasePorts('h1', 'r-6', 1, range)).rejects.toThrow(
      'no free engine ports left on h1 in 40000-40003: widen enginePorts in server.yaml',
    );
    await store.releaseReplica('r-2');
    expect(await store.leasePorts('h1', 'r-6', 1, range)).toEqual([40_003]);
  });

  test('two replicas leasing at once on one host never get the same port', async () => {
    await Promise.all(['r-2', 'r-3', 'r-4', 'r-6'].map((r) => store.releaseReplica(r)));
    const got = await Promise.all(['c-0', 'c-1', 'c-2', 'c-3'].map((r) => store.leasePorts('h1', r, 1, range)));
    expect(got.flat().sort()).toEqual([40_000, 40_001, 40_002, 40_003]);
  });

  test('releaseReplicas forgets the shards and leases of the replicas named, and only theirs', async () => {
    const placed = ['b-0', 'b-1', 'b-2'];
    for (const [i, r] of placed.entries()) {
      const [port] = await store.leasePorts('h9', r, 1, range);
      await store.setShards(r, [{ replicaId: r, rank: 0, nodeId: id('h9'), port: port ?? 0, gpus: [i] }]);
    }
    await store.releaseReplicas(['b-0', 'b-2']);
    expect((await store.listShards()).filter((s) => placed.includes(s.replicaId)).map((s) => s.replicaId)).toEqual([
      'b-1',
    ]);
    // Their two ports are free again (released, so they come after the never-leased 40003), b-1's is not.
    expect(await store.leasePorts('h9', 'b-3', 3, range)).toEqual([40_003, 40_000, 40_002]);
  });
});

describe('node state', () => {
  // As node liveness does: down only if last_seen is still what was read.
  const markDown = async (n: string): Promise<boolean> => {
    const read = (await store.silentNodes(0)).find((x) => x.id === n);
    if (!read) throw new Error(`${n} is not among the silent nodes`);
    return store.markNodeDownIfSeen(id(n), read.seen);
  };

  test('a node is marked down only if its last_seen is still the one read: a beat written meanwhile wins', async () => {
    await store.upsertNode(id('c3'), inv);
    await sleep(30);
    const read = (await store.silentNodes(10)).find((x) => x.id === 'c3');
    expect(read?.seen).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$/);
    await sleep(5);
    expect(await store.heartbeat(id('c3'))).toBe('ready'); // another control plane heard it meanwhile
    expect(await store.markNodeDownIfSeen(id('c3'), read?.seen ?? '')).toBe(false);
    expect(await store.nodeState(id('c3'))).toBe('ready');
    await sleep(5);
    expect(await markDown('c3')).toBe(true);
    expect(await store.nodeState(id('c3'))).toBe('down');
  });

  test('node reads one registered node as listNodes has it, and null for one never registered', async () => {
    await store.upsertNode(id('c4'), inv);
    expect(await store.node(id('c4'))).toEqual((await store.listNodes()).find((n) => n.id === 'c4'));
    expect((await store.node(id('c4')))?.inventory).toEqual(inv);
    expect(await store.node(id('c-never'))).toBeNull();
  });

  test('a cordoned node that goes down comes back cordoned, by heartbeat or by registering again', async () => {
    await store.upsertNode(id('c1'), inv);
    expect(await store.setNodeState('c1', 'cordoned')).toBe(true);
    await sleep(30);
    const [read] = await store.silentNodes(10);
    expect(read?.id).toBe('c1');
    expect(await store.markNodeDownIfSeen(id('c1'), read?.seen ?? '')).toBe(true);
    expect(await store.markNodeDownIfSeen(id('c1'), read?.seen ?? '')).toBe(false);
    expect(await store.nodeState(id('c1'))).toBe('down');
    expect(await store.isCordoned('c1')).toBe(true);
    expect(await store.heartbeat(id('c1'))).toBe('down');
    expect(await store.nodeState(id('c1'))).toBe('cordoned');

    await sleep(30);
    await markDown('c1');
    await store.upsertNode(id('c1'), inv); // the agent restarted
    expect(await store.nodeState(id('c1'))).toBe('cordoned');
  });

  test('a down node can be cordoned and uncordoned; it stays down until seen, then takes the cordon it was given', async () => {
    await store.upsertNode(id('c2'), inv);
    await sleep(30);
    await markDown('c2');
    await store.setNodeState('c2', 'cordoned');
    expect(await store.nodeState(id('c2'))).toBe('down');
    await store.heartbeat(id('c2'));
    expect(await store.nodeState(id('c2'))).toBe('cordoned');
    await sleep(30);
    await markDown('c2');
    await store.setNodeState('c2', 'ready');
    expect(await store.nodeState(id('c2'))).toBe('down');
    expect(await store.isCordoned('c2')).toBe(false);
    await store.heartbeat(id('c2'));
    expect(await store.nodeState(id('c2'))).toBe('ready');
  });
});

describe('routing rows', () => {
  test("carry the catalog's first-byte timeout and routing of each model that sets them, read from its spec", async () => {
    const profiles = [{ name: 'default', engine: 'sim' as const, nodes: 1, gpusPerNode: 1, args: [] }];
    await store.upsertModel({
      name: 'slow-prefill',
      source: 'sim://slow-prefill',
      replicas: 1,
      profiles,
      firstByteMs: 1_800_000,
      routing: { policy: 'prefix', loadFactor: 1.5 },
    });
    await store.upsertModel({ name: 'plain', source: 'sim://plain', replicas: 1, profiles });
    const rows = await store.routeRows();
    expect(rows.models).toEqual(expect.arrayContaining(['plain', 'slow-prefill']));
    expect(rows.firstByteMs).toEqual({ 'slow-prefill': 1_800_000 });
    expect(rows.routing).toEqual({ 'slow-prefill': { policy: 'prefix', loadFactor: 1.5 } });
  });
});

describe('replica reads', () => {
  test("listReplicas gives each replica its own shards in rank order; replicaState and replicaIdsIn read one state's rows", async () => {
    const base = { model: 'rd', profile: 'p', endpoint: null };
    await store.setReplica({ id: 'rd-1', ...base, state: 'waiting' });
    await store.setReplica({ id: 'rd-2', ...base, state: 'starting' });
    await store.setReplica({ id: 'rd-3', ...base, state: 'waiting' });
    await store.setShards('rd-2', [
      { replicaId: 'rd-2', rank: 1, nodeId: id('h5'), port: 41_001, gpus: [1] },
      { replicaId: 'rd-2', rank: 0, nodeId: id('h4'), port: 41_000, gpus: [0] },
    ]);
    await store.setShards('rd-3', [{ replicaId: 'rd-3', rank: 0, nodeId: id('h6'), port: 41_002, gpus: [2] }]);
    const rows = await store.listReplicas('rd');
    expect(rows.map((r) => [r.id, r.shards.map((x) => `${x.rank}@${x.nodeId}:${x.port}`)])).toEqual([
      ['rd-1', []],
      ['rd-2', ['0@h4:41000', '1@h5:41001']],
      ['rd-3', ['0@h6:41002']],
    ]);
    expect(await store.replicaState('rd-2')).toBe('starting');
    expect(await store.replicaState('rd-none')).toBeNull();
    expect((await store.replicaIdsIn('waiting')).filter((r) => r.startsWith('rd-'))).toEqual(['rd-1', 'rd-3']);
  });
});

describe('replica ready marks', () => {
  test('markReady takes a replica starting on that placement to ready; not one stopped, rebuilt or placed elsewhere', async () => {
    const base = { model: 'm', profile: 'p' };
    const state = async (r: string): Promise<[string, string | null] | undefined> => {
      const row = (await store.listReplicas('m')).find((x) => x.id === r);
      return row && [row.state, row.endpoint];
    };
    const rank0 = { nodeId: id('h7'), port: 41_000 };
    await store.setReplica({ id: 'r-1', ...base, state: 'starting', endpoint: null });
    await store.setShards('r-1', [{ replicaId: 'r-1', rank: 0, ...rank0, gpus: [0] }]);
    expect(await store.markReady({ id: 'r-1', model: 'm', endpoint: 'http://h7:41000', rank0 })).toBe(true);
    expect(await state('r-1')).toEqual(['ready', 'http://h7:41000']);
    // A wait that outlived its replica's stop, or its placement (now rank 0 elsewhere), changes nothing.
    await store.setReplica({ id: 'r-1', ...base, state: 'stopping', reason: null });
    expect(await store.markReady({ id: 'r-1', model: 'm', endpoint: 'http://h7:41000', rank0 })).toBe(false);
    expect((await state('r-1'))?.[0]).toBe('stopping');
    await store.setReplica({ id: 'r-1', ...base, state: 'starting', endpoint: null });
    await store.setShards('r-1', [{ replicaId: 'r-1', rank: 0, nodeId: id('h8'), port: 41_000, gpus: [0] }]);
    expect(await store.markReady({ id: 'r-1', model: 'm', endpoint: 'http://h7:41000', rank0 })).toBe(false);
    expect(await state('r-1')).toEqual(['starting', null]);
  });
});

describe('named locks', () => {
  test('are scoped to the database: another database takes the same name at once, this one waits', async () => {
    const otherUrl = testMysqlUrl();
    const other = await openDatabase(otherUrl);
    const sameDb = await openDatabase(url); // another pool on this database: as another process would be
    try {
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      let entered!: () => void;
      const inside = new Promise<void>((r) => (entered = r));
      const holding = store.withLock('llmgw_place', 5, async () => {
        entered();
        await held;
      });
      await inside;
      // Another cluster's database: not serialised behind this one's placement.
      await expect(new Store(other).withLock('llmgw_place', 1, async () => 'other db')).resolves.toBe('other db');
      // The same database from another pool: waits, and times out while the lock is held.
      await expect(new Store(sameDb).withLock('llmgw_place', 1, async () => 'same db')).rejects.toThrow(
        'timed out after 1s waiting for lock llmgw_place',
      );
      release();
      await holding;
      await expect(new Store(sameDb).withLock('llmgw_place', 1, async () => 'same db')).resolves.toBe('same db');
    } finally {
      await other.end();
      await sameDb.end();
      await dropDatabase(otherUrl);
    }
  });
});
