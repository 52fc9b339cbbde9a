/**
 * A drain waits for the work: six 60-s streams through a real gateway (the gateway role, reporting its requests in
 * flight to MySQL) on the two replicas of a node that is drained; every stream ends whole. Then a drain with only
 * short requests in flight, to measure what the wait adds per replica. Real Temporal, MariaDB, node workers and
 * sim engine processes (SIGTERM grace 3 s here: a stream still running at the stop would be cut).
 */
import type { DevServer } from '../../cli/cluster/temporal-dev';
import { drain } from '../../cli/ctl/drain';
import type { ServerConfig } from '../../config/types';
import { DrainStore } from '../../lib/store/drain';
import { QUEUES, workflowIds } from '../../lib/names';
import type { NodeId, ReplicaRecord } from '../../lib/types';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { startGatewayRole, type GatewayRole } from '../../workers/gateway';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { startLoad, waitRoutable } from '../helpers/load';
import { registerNode, simInventory, startNodeWorker, stopSimCluster, type NodeWorker } from '../helpers/node-workers';
import { streamChat } from '../helpers/streams';
import { waitFor } from '../helpers/wait';

const MODEL = 'long';
/** 600 tokens at 10 tokens/s: each stream lasts 60 s. */
const TOKENS = 600;

describe('a drain waits for the requests in flight on the replicas it moves', () => {
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let gateway: GatewayRole;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();
  const live = async (): Promise<ReplicaRecord[]> =>
    (await cp.store.listReplicas(MODEL)).filter((r) => r.state !== 'stopped');
  const readyOn = async (node: string): Promise<string[]> =>
    (await live()).filter((r) => r.state === 'ready' && r.shards.some((s) => s.nodeId === node)).map((r) => r.id);
  /** Each replica's time from leaving routing (stopping) to stopped, from the event log. */
  const stopTimes = async (ids: string[]): Promise<Record<string, number>> => {
    const events = await cp.store.recentEvents(200);
    const at = (id: string, kind: string): number =>
      events.find((e) => e.replicaId === id && e.kind === kind)?.at.getTime() ?? NaN;
    return Object.fromEntries(ids.map((id) => [id, at(id, 'replica.stopped') - at(id, 'replica.stopping')]));
  };
  const runDrain = async (nodeId: string): Promise<{ lines: string[]; ms: number }> => {
    const lines: string[] = [];
    const started = Date.now();
    await drain(cp.client, {
      nodeId: nodeId as NodeId,
      timeoutS: 300,
      allowDowntime: false,
      wait: true,
      uiLink: 'ui',
      out: (s) => lines.push(...s.split('\n').filter(Boolean)),
    });
    return { lines, ms: Date.now() - started };
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: 'sim://long',
          replicas: 2,
          profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '10'] }],
        },
      ],
    });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    gateway = await startGatewayRole({ config });
    await registerNode(cp, 'n1', simInventory({ gpus: 2 }));
    workers.push(await startNodeWorker(temporal.address, 'n1', pids, { cp }));
    await cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    await waitFor(async () => (await readyOn('n1')).length === 2, {
      timeoutMs: 60_000,
      what: 'both replicas ready on n1',
    });
    await registerNode(cp, 'n2', simInventory({ gpus: 2 }));
    workers.push(await startNodeWorker(temporal.address, 'n2', pids, { cp }));
  }, 120_000);

  afterAll(async () => {
    await stopSimCluster({
      cp,
      model: MODEL,
      workflows: [workflowIds.model(MODEL), workflowIds.drain('n1'), workflowIds.drain('n2')],
      workers,
      pids,
      gateway,
      temporal,
      mysqlUrl: config.mysql.url,
      dropDatabase,
    });
  }, 60_000);

  test('six 60-s streams on the drained node all end whole, with [DONE]', async () => {
    await waitRoutable(gateway.url, MODEL);
    const originals = await readyOn('n1');
    const streams = Array.from({ length: 6 }, (_, k) => streamChat(gateway.url, MODEL, `long story ${k}`, TOKENS));
    // Every stream is under way (and reported) before the drain starts.
    const drains = new DrainStore(cp.store.pool);
    await waitFor(
      async () =>
        (await drains.liveReports()).reduce((n, r) => n + Object.values(r.inflight).reduce((a, b) => a + b, 0), 0) ===
        6,
      { timeoutMs: 10_000, what: 'the gateway to report 6 requests in flight' },
    );

    const { lines, ms } = await runDrain('n1');
    const outcomes = await Promise.all(streams);
    const times = await stopTimes(originals);
    console.log(
      `drain of 2 replicas carrying 6 streams: ${ms}ms; original left routing → stopped: ${JSON.stringify(times)}`,
    );
    console.log(lines.join('\n'));

    for (const o of outcomes) {
      expect({
        prompt: o.prompt,
        status: o.status,
        error: o.error,
        done: o.done,
        whole: o.content === o.expected,
      }).toEqual({ prompt: o.prompt, status: 200, error: null, done: true, whole: true });
    }
    // The streams took their 60 s: the drain did not cut them short, it waited.
    expect(Math.min(...outcomes.map((o) => o.ms))).toBeGreaterThan(55_000);
    // ctl drain said what it waited for.
    expect(
      lines.some((l) =>
        /moving long-\d+ → long-\d+ ready; waiting for [1-6] requests? in flight on long-\d+ \(grace \d+m\d\ds left\)/.test(
          l,
        ),
      ),
    ).toBe(true);
    expect(lines.at(-1)).toMatch(/^n1: drained, 2 replicas moved/);
    expect(await readyOn('n1')).toEqual([]);
    expect(await readyOn('n2')).toHaveLength(2);
    // The first original moved stayed out of routing, engine running, until its streams were done (the second one's
    // streams had ended by the time its replacement served); the event log says so.
    const first = Object.entries(times).sort(([, a], [, b]) => b - a)[0];
    expect(first?.[1]).toBeGreaterThan(50_000);
    const drained = (await cp.store.recentEvents(200)).filter((e) => e.kind === 'replica.drained');
    expect(drained.map((e) => e.replicaId)).toContain(first?.[0]);
  }, 240_000);

  test('with only short requests in flight, a stop waits about one gateway report, and fails no request', async () => {
    await registerNode(cp, 'n3', simInventory({ gpus: 2 }));
    workers.push(await startNodeWorker(temporal.address, 'n3', pids, { cp }));
    const originals = await readyOn('n2');
    const load = startLoad(gateway.url, MODEL, { clients: 3, maxTokens: 2 }); // 200 ms each
    await waitFor(() => load.stats().ok > 10, { timeoutMs: 20_000, what: 'the load to get going' });
    const { ms } = await runDrain('n2');
    const s = await load.stop();
    const times = await stopTimes(originals);
    console.log(
      `drain of 2 replicas under short requests: ${ms}ms; original left routing → stopped: ${JSON.stringify(times)}; ${s.ok} ok, ${s.failed} failed`,
    );
    expect({ failed: s.failed, failures: s.failures }).toEqual({ failed: 0, failures: [] });
    for (const t of Object.values(times)) expect(t).toBeLessThan(10_000);
    expect(await readyOn('n3')).toHaveLength(2);
  }, 180_000);
});
