/**
 * Heartbeats kept in the control plane's memory (issue 24): a node beating every second costs MySQL a write every
 * NODE_SEEN_WRITE_MS, not one a beat; a node that stops beating is still judged lost within NODE_SILENT_MS plus a
 * sweep; and a mark-down read from a stale last_seen loses to a beat another control plane writes meanwhile.
 * Real Temporal, real MariaDB, the real control plane and its control API over mTLS; nodes are certificates that
 * beat as an agent does.
 */
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { NODE_SEEN_WRITE_MS, NODE_SILENT_MS, NODE_SWEEP_MS } from '../../lib/liveness';
import type { RowDataPacket } from 'mysql2/promise';
import { parseNodeId, type NodeInventory } from '../../lib/types';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { NodeLiveness } from '../../workers/control/node-liveness';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { simInventory } from '../helpers/node-workers';
import { certClient, closeCertClients } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
/** No door and no shard: no port to probe, so a silent node is lost on silence alone. */
const inventory: NodeInventory = simInventory({ fabric: false });

describe('node heartbeats in memory, MySQL written a few times a minute', () => {
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({ temporalAddress: temporal.address, mysqlUrl: testMysqlUrl(), catalog: [] });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
  });

  afterAll(async () => {
    await cp?.close();
    await closeCertClients();
    await temporal?.stop();
    if (config) await dropDatabase(config.mysql.url);
  });

  /** POSTs `path` for `nodeId` with its node certificate; the HTTP status. */
  const agentPost = async (nodeId: string, path: string, body: object): Promise<number> => {
    const { fetch } = await certClient(config, cp.store, nodeId);
    const res = await fetch(`${cp.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ nodeId, ...body }),
    });
    await res.text();
    return res.status;
  };
  const lastSeen = async (nodeId: string): Promise<string | null> => {
    const [rows] = await cp.store.pool.query<RowDataPacket[]>(
      'SELECT CAST(last_seen AS CHAR) AS s FROM nodes WHERE id = ?',
      [nodeId],
    );
    return (rows[0]?.s as string | null) ?? null;
  };

  test('a node beating every second is written to MySQL every 15 s, and is lost within 4 s of its last beat', async () => {
    expect(await agentPost('nb-1', '/v1/agent/register', { inventory })).toBe(200);
    const writes = new Set([await lastSeen('nb-1')]);
    let answered = 0;
    let lastBeat = 0;
    const ops = await certClient(config, cp.store, 'operator', { role: 'operator' });
    let listedFresher = false;
    const end = Date.now() + NODE_SEEN_WRITE_MS + 2000;
    while (Date.now() < end) {
      const at = Date.now();
      if ((await agentPost('nb-1', '/v1/agent/heartbeat', {})) === 200) {
        answered += 1;
        lastBeat = Date.now();
      }
      // Every write stamps a new last_seen (NOW(3)): the distinct values read are the writes.
      for (let t = 0; t < 5; t += 1) {
        writes.add(await lastSeen('nb-1'));
        await sleep(150);
      }
      // `ctl nodes` (GET /v1/nodes) says when this control plane last heard the node, not MySQL's older copy.
      const listed = (await (await ops.fetch(`${cp.url}/v1/nodes`)).json()) as {
        nodes: { id: string; lastSeen: string }[];
      };
      const seen = Date.parse(listed.nodes.find((n) => n.id === 'nb-1')?.lastSeen ?? '');
      const mysqlSeen = Date.parse(`${(await lastSeen('nb-1'))?.replace(' ', 'T')}Z`);
      if (seen > mysqlSeen + 1500) listedFresher = true;
      await sleep(Math.max(0, 1000 - (Date.now() - at)));
    }
    process.stdout.write(
      `node beats: ${answered} heartbeats answered in ${NODE_SEEN_WRITE_MS / 1000 + 2} s, last_seen written ${writes.size} times (registration included)\n`,
    );
    expect(answered).toBeGreaterThanOrEqual(12);
    // Registration, then one write 15 s on (one more if a beat came late enough to count as a gap).
    expect(writes.size).toBeGreaterThanOrEqual(2);
    expect(writes.size).toBeLessThanOrEqual(3);
    expect(listedFresher).toBe(true);

    // It stops beating: this control plane judges it from memory, not from MySQL's last_seen (older still).
    const down = await waitFor(async () => (await cp.store.nodeState(parseNodeId('nb-1'))) === 'down' && Date.now(), {
      timeoutMs: NODE_SILENT_MS + 10_000,
      intervalMs: 50,
      what: 'nb-1 marked down',
    });
    const after = down - lastBeat;
    process.stdout.write(`node beats: nb-1 marked down ${after} ms after its last beat answered\n`);
    expect(after).toBeGreaterThanOrEqual(NODE_SILENT_MS - 100);
    // The silence, a sweep's period, and room for a loaded 2-core host.
    expect(after).toBeLessThanOrEqual(NODE_SILENT_MS + NODE_SWEEP_MS + 2000);
    const events = await cp.store.recentEvents(50);
    expect(events.filter((e) => e.kind === 'node.down' && e.nodeId === 'nb-1')).toHaveLength(1);
  }, 60_000);

  test('a mark-down read from a stale last_seen loses to a beat another control plane writes meanwhile', async () => {
    // Two nodes that beat at a control plane now gone: their last_seen ages in MySQL.
    await cp.store.upsertNode(parseNodeId('nb-3'), inventory);
    await cp.store.upsertNode(parseNodeId('nb-4'), inventory);
    // Another control plane's judge, reading MySQL (stale after 1 s here, not 19): between its read and its
    // conditional update, nb-3 beats at this control plane (its first beat here, so written at once).
    let beat = 0;
    const judge = new NodeLiveness({
      store: {
        silentNodes: async (ms) => {
          const read = (await cp.store.silentNodes(ms)).filter((n) => n.id === 'nb-3' || n.id === 'nb-4');
          beat = await agentPost('nb-3', '/v1/agent/heartbeat', {});
          return read;
        },
        markNodeDownIfSeen: (id, seen) => cp.store.markNodeDownIfSeen(id, seen),
        event: (e) => cp.store.event(e),
      },
      heard: () => undefined,
      lastDoorCall: () => undefined,
      nodeLost: async () => [],
      log: () => undefined,
      silentMs: 500,
      staleMs: 1000,
    });
    await sleep(1300);
    await judge.sweep();
    expect(beat).toBe(200);
    expect(await cp.store.nodeState(parseNodeId('nb-3'))).toBe('ready');
    expect(await cp.store.nodeState(parseNodeId('nb-4'))).toBe('down');
    const downs = (await cp.store.recentEvents(50)).filter((e) => e.kind === 'node.down').map((e) => e.nodeId);
    expect(downs).toContain('nb-4');
    expect(downs).not.toContain('nb-3');
  }, 30_000);
});
