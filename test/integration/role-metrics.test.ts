/**
 * Every role's metrics, parsed as Prometheus text (real MariaDB, Temporal, TLS): the control plane's nodes by state
 * and registration refusals, a real agent's engines, and a ca-worker process' own series and its Temporal SDK's.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { parseNodeId } from '../../lib/types';
import { startAgent } from '../../workers/agent/index';
import type { Agent as NodeAgent } from '../../workers/agent/options';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { spawnLlmgw, untilLogged, type LlmgwProc } from '../helpers/llmgw-process';
import { simInventory } from '../helpers/node-workers';
import { freePort } from '../helpers/ports';
import { scrape, undocumented, valueOf } from '../helpers/prom-text';
import { certClient, closeCertClients } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const ROOT = resolve(__dirname, '../..');

describe('metrics of the control plane, an agent and a worker process', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-role-metrics-'));
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let agent: NodeAgent | undefined;
  let proc: LlmgwProc | undefined;

  beforeAll(async () => {
    temporal = await startTestTemporal();
    const base = await testConfig({ temporalAddress: temporal.address, mysqlUrl: testMysqlUrl(), catalog: [] });
    config = { ...base, metrics: { ...base.metrics, controlPlane: { host: '127.0.0.1', port: 0, temporalPort: 0 } } };
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
  }, 120_000);

  afterAll(async () => {
    if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
    await agent?.close();
    await cp?.close();
    await closeCertClients();
    await temporal?.stop();
    await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  test('the control plane counts nodes by state and registration refusals; the agent its engines', async () => {
    expect(cp.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    const cpMetrics = cp.metricsUrl as string;
    const { cert } = await certClient(config, cp.store, 'a1');
    agent = await startAgent({
      nodeId: parseNodeId('a1'),
      server: cp.url,
      tls: cert,
      nvidiaSmi: 'nvidia-smi',
      noGpu: true,
      ibRoot: join(ROOT, 'test/fixtures/sysfs/none'),
      cpuinfo: '/proc/cpuinfo',
      fabrics: [],
      advertiseHost: '127.0.0.1',
      engineSetup: { enginesDir: join(dir, 'installs'), bins: {} },
      stateDir: join(dir, 'a1'),
      stopEnginesOnExit: true,
      metrics: { host: '127.0.0.1', port: 0 },
      log: () => undefined,
    });
    // MySQL is read at most every 5 s per scrape; the node shows within that.
    const m = await waitFor(
      async () => {
        const s = await scrape(cpMetrics);
        return valueOf(s, 'llmgw_control_nodes', { state: 'ready' }) === 1 ? s : null;
      },
      { timeoutMs: 12_000, intervalMs: 500, what: 'llmgw_control_nodes{state="ready"} 1' },
    );
    expect(m.get('llmgw_control_replicas')?.type).toBe('gauge');
    expect(m.get('llmgw_control_workflows')?.type).toBe('gauge');
    expect(m.get('llmgw_control_registration_refusals_total')?.type).toBe('counter');

    // A node certificate claiming another node's id is refused, and counted by reason.
    const n1 = await certClient(config, cp.store, 'n1');
    const r = await n1.fetch(`${cp.url}/v1/agent/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ nodeId: 'n2', inventory: simInventory() }),
    });
    expect(r.status).toBe(403);
    const after = await scrape(cpMetrics);
    expect(valueOf(after, 'llmgw_control_registration_refusals_total', { reason: 'identity-mismatch' })).toBe(1);

    // The agent: ensureEngines (started when it registered) probes the sim engine; it is then offered.
    expect(agent.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    const agentMetrics = agent.metricsUrl as string;
    const a = await waitFor(
      async () => {
        const s = await scrape(agentMetrics);
        return valueOf(s, 'llmgw_agent_engines', { engine: 'sim', state: 'offered' }) === 1 ? s : null;
      },
      { timeoutMs: 30_000, intervalMs: 500, what: 'llmgw_agent_engines{engine="sim",state="offered"} 1' },
    );
    expect(valueOf(a, 'llmgw_agent_engine_processes')).toBe(0);
    expect(a.get('llmgw_agent_engine_starts_total')?.type).toBe('counter');
    expect(a.get('llmgw_agent_engine_exits_total')?.type).toBe('counter');
    expect(a.get('llmgw_agent_weights_fetched_bytes_total')?.type).toBe('counter');
    const docs = readFileSync(join(ROOT, 'docs/metrics.md'), 'utf8');
    expect(undocumented(a, docs)).toEqual([]);
    expect(undocumented(after, docs)).toEqual([]);
  }, 90_000);

  test("a ca-worker process serves its process series and its Temporal SDK's on ports of their own", async () => {
    const port = await freePort();
    const temporalPort = await freePort();
    const file = join(dir, 'ca-worker.yaml');
    writeFileSync(
      file,
      stringify({ ...config, metrics: { ...config.metrics, caWorker: { host: '127.0.0.1', port, temporalPort } } }),
    );
    proc = spawnLlmgw(['ca-worker', '--config', file, '--ca-dir', join(config.tls.ca, '..')]);
    await untilLogged(proc, 'ca worker running', 60_000, 'the ca-worker to run');
    await untilLogged(proc, 'metrics listening', 10_000, 'the ca-worker to serve its metrics');
    expect(proc.stderr.join('\n')).toContain(`"url":"http://127.0.0.1:${temporalPort}/metrics"`);
    const own = await scrape(`http://127.0.0.1:${port}/metrics`);
    expect(valueOf(own, 'process_cpu_seconds_total')).toBeGreaterThan(0);
    // The SDK's exporter answers once its worker polls; its series are named temporal_*.
    const sdk = await waitFor(
      async () => {
        const s = await scrape(`http://127.0.0.1:${temporalPort}/metrics`);
        return [...s.keys()].some((k) => k.startsWith('temporal_')) ? s : null;
      },
      { timeoutMs: 30_000, intervalMs: 500, what: "the Temporal SDK's temporal_* series" },
    );
    console.log(`temporal sdk series: ${[...sdk.keys()].slice(0, 8).join(', ')}`);
    expect([...sdk.keys()].some((k) => k.startsWith('temporal_'))).toBe(true);
  }, 120_000);
});
