/**
 * Node state in a real MariaDB database of its own: a cordon is the operator's and outlives the node going
 * down (the sweeper) and coming back (a heartbeat or a new registration); uncordoning a down node leaves it
 * down until it is seen.
 */
import type { Pool } from 'mysql2/promise';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import type { NodeId, NodeInventory } from '../../lib/types';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';

const url = testMysqlUrl();
let pool: Pool;
let store: Store;
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

test('a cordoned node that goes down comes back cordoned, by heartbeat or by registering again', async () => {
  await store.upsertNode(id('c1'), inv);
  expect(await store.setNodeState('c1', 'cordoned')).toBe(true);
  await sleep(30);
  expect(await store.markStaleNodesDown(10)).toEqual(['c1']);
  expect(await store.nodeState(id('c1'))).toBe('down');
  expect(await store.isCordoned('c1')).toBe(true);
  expect(await store.heartbeat(id('c1'))).toBe('down');
  expect(await store.nodeState(id('c1'))).toBe('cordoned');

  await sleep(30);
  await store.markStaleNodesDown(10);
  await store.upsertNode(id('c1'), inv); // the agent restarted
  expect(await store.nodeState(id('c1'))).toBe('cordoned');
});

test('a down node can be cordoned and uncordoned; it stays down until seen, then takes the cordon it was given', async () => {
  await store.upsertNode(id('c2'), inv);
  await sleep(30);
  await store.markStaleNodesDown(10);
  await store.setNodeState('c2', 'cordoned');
  expect(await store.nodeState(id('c2'))).toBe('down');
  await store.heartbeat(id('c2'));
  expect(await store.nodeState(id('c2'))).toBe('cordoned');
  await sleep(30);
  await store.markStaleNodesDown(10);
  await store.setNodeState('c2', 'ready');
  expect(await store.nodeState(id('c2'))).toBe('down');
  expect(await store.isCordoned('c2')).toBe(false);
  await store.heartbeat(id('c2'));
  expect(await store.nodeState(id('c2'))).toBe('ready');
});
