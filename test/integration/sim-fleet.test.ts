/**
 * A small simulated fleet (llmgw sim-fleet): 20 real agents — 18 in this process, two in `llmgw sim-fleet --nodes 2
 * --fleet-proc 2` (one node in each of its two child processes, so one can be lost for real: SIGKILL) — against a
 * real control plane, Temporal dev server, MariaDB and gateway. Each node's certificate comes from a CSR it made.
 * Every node registers, every replica serves, a completion goes through the gateway, and the lost node's replica is
 * rebuilt on another node.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { stringify } from 'yaml';
import { createCaOperations } from '../../activities/ca';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import { caPaths, makeNodeCsrAsync } from '../../lib/pki';
import { workflowIds } from '../../lib/names';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { fleetCatalog } from '../../workers/sim-fleet/catalog';
import { fleetNodeId, startSimFleet, type SimFleet } from '../../workers/sim-fleet';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl, TEST_API_KEY } from '../helpers/cluster-parts';
import { spawnLlmgw, untilLogged, type LlmgwProc } from '../helpers/llmgw-process';
import { closeCertClients, certClient, writeOperatorCert } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const NODES = 20;
/** Whether process `pid` still exists (a zombie counts until its parent reaps it). */
const running = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
const VICTIM = NODES - 1;

describe('llmgw sim-fleet: 20 simulated nodes', () => {
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let gateway: RunningGateway;
  let fleet: SimFleet | undefined;
  let victim: LlmgwProc | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-sim-fleet-'));
  const catalog = fleetCatalog(NODES);

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({ temporalAddress: temporal.address, mysqlUrl: testMysqlUrl(), catalog: [] });
    // Each node's engine ports are on its own address: a range of 20 is ample for one replica each.
    config = { ...config, enginePorts: { base: config.enginePorts.base, count: 20 } };
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    gateway = await startGateway({
      host: '127.0.0.1',
      port: 0,
      routing: new RoutingTable(() => cp.store.routeRows(), { refreshMs: config.gateway.refreshMs }),
      apiKeys: [TEST_API_KEY],
    });
  }, 120_000);

  afterAll(async () => {
    victim?.child.kill('SIGKILL');
    for (const m of catalog)
      await cp?.client.workflow
        .getHandle(workflowIds.model(m.name))
        .terminate()
        .catch(() => undefined);
    for (const r of (await cp?.store.listReplicas().catch(() => [])) ?? [])
      await cp.client.workflow
        .getHandle(workflowIds.replica(r.id))
        .terminate()
        .catch(() => undefined);
    await fleet?.close();
    await gateway?.close();
    await cp?.close();
    await closeCertClients();
    await temporal?.stop();
    if (config) await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }, 120_000);

  test('every node registers, every replica serves, a completion is answered, a lost node is rebuilt', async () => {
    const caDir = dirname(config.tls.ca);
    const ops = createCaOperations({ caDir, store: cp.store });
    fleet = await startSimFleet({
      nodes: NODES - 2,
      gpus: 2,
      fabrics: 2,
      servers: [cp.url],
      caPem: readFileSync(caPaths(caDir).cert, 'utf8'),
      // As a node gets its certificate: its key made off the event loop, its CSR signed by the CA.
      certificate: async (id) => {
        const { csrPem, keyPem } = await makeNodeCsrAsync(id);
        return { certPem: (await ops.signNodeCsr({ csrPem, identity: id })).certPem, keyPem };
      },
      dir: join(dir, 'fleet'),
      log: () => undefined,
    });
    // The last two run under `llmgw sim-fleet --fleet-proc 2`, one in each child: the last one's is lost below.
    await writeOperatorCert(config, cp.store);
    const configFile = join(dir, 'server.yaml');
    writeFileSync(
      configFile,
      stringify({
        temporal: { address: config.temporal.address },
        mysql: { url: config.mysql.url },
        listeners: config.listeners,
        tls: config.tls,
        enginePorts: config.enginePorts,
      }),
    );
    victim = spawnLlmgw([
      'sim-fleet',
      ...['--nodes', '2', '--first', String(VICTIM - 1), '--fleet-proc', '2', '--gpus', '2', '--fabrics', '2'],
      ...['--config', configFile, '--ca-dir', caDir, '--state-dir', join(dir, 'victim')],
    ]);
    await untilLogged(victim, 'sim-fleet running', 90_000, 'the two nodes of the fleet processes to run');
    // The child process holding the victim node (its parent says which, as each child runs).
    const victimPid = victim.lines
      .filter((l) => l.includes('"fleet process running"'))
      .map((l) => JSON.parse(l) as { first?: number; pid?: number })
      .find((l) => l.first === VICTIM)?.pid;
    expect(victimPid).toBeGreaterThan(0);

    const nodes = await cp.store.listNodes();
    expect(nodes.filter((n) => n.id.startsWith('fleet-') && n.state === 'ready')).toHaveLength(NODES);

    const operator = await certClient(config, cp.store, 'operator', { role: 'operator' });
    const applied = await operator.fetch(`${cp.url}/v1/catalog/apply`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ catalog, engines: config.engines, prune: false, dryRun: false }),
    });
    expect(applied.status).toBe(200);
    const ready = async (): Promise<number> =>
      (await cp.store.listReplicas()).filter((r) => r.state === 'ready').length;
    await waitFor(async () => (await ready()) === NODES, { timeoutMs: 90_000, what: `${NODES} replicas ready` });
    expect(fleet.engines.count()).toBe(NODES - 2);

    const url = `${gateway.url}/v1/chat/completions`;
    const answer = await waitFor(
      async () => {
        const r = await fetch(url, {
          method: 'POST',
          headers: { authorization: `Bearer ${TEST_API_KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'fleet-m0', messages: [{ role: 'user', content: 'hello' }], max_tokens: 3 }),
        });
        return r.status === 200 ? ((await r.json()) as { choices: { message: { content: string } }[] }) : undefined;
      },
      { timeoutMs: 10_000, what: 'a completion through the gateway' },
    );
    expect(answer.choices[0]?.message.content.length).toBeGreaterThan(0);

    const onVictim = (await cp.store.listReplicas()).filter(
      (r) => r.state === 'ready' && r.shards.some((s) => s.nodeId === fleetNodeId(VICTIM)),
    );
    expect(onVictim).toHaveLength(1);
    const lostAt = Date.now();
    process.kill(victimPid as number, 'SIGKILL');
    await waitFor(() => !running(victimPid as number), {
      timeoutMs: 10_000,
      what: `the victim's process ${victimPid} gone`,
    });
    const rebuilt = await waitFor(
      async () => {
        const r = (await cp.store.listReplicas()).find((x) => x.id === onVictim[0]?.id);
        return r?.state === 'ready' && r.shards.every((s) => s.nodeId !== fleetNodeId(VICTIM)) ? r : undefined;
      },
      { timeoutMs: 60_000, what: `${onVictim[0]?.id} rebuilt off the lost node` },
    );
    console.log(
      `sim-fleet: ${onVictim[0]?.id} ready again on ${rebuilt.shards[0]?.nodeId} ${Date.now() - lostAt} ms after its node was killed`,
    );
    expect(await ready()).toBe(NODES);
  }, 300_000);
});
