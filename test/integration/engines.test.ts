/**
 * Engines on nodes, with a real agent, the real control plane and Temporal: the control plane names the
 * engines (server.yaml engines), the agent's ensureEngines runs each one and offers only those that pass; an
 * engine that cannot start (a binary that exits with a loader error, as a vLLM without its CUDA runtime does)
 * is refused with its own error, shown by `llmgw ctl nodes`; "" without the operator's binary is refused
 * with the flag to pass; a model whose source is a URL has its weights fetched to the node first; a control plane started with other engines has the node probe again; the offered sim
 * engine then serves a replica placed there (its program resolved from the probe's record).
 */
import { chmodSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';
import { ctlCommand } from '../../cli/ctl/index';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { workflowIds } from '../../lib/names';
import { parseNodeId, type EngineStatus, type ModelSpec } from '../../lib/types';
import { startAgent } from '../../workers/agent/index';
import type { Agent as NodeAgent } from '../../workers/agent/options';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { startOrigin, type Origin } from '../helpers/origin';
import { certClient, closeCertClients, writeOperatorCert } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const ROOT = resolve(__dirname, '../..');
const NODE = parseNodeId('e1');
const MODEL: ModelSpec = {
  name: 'probed',
  source: 'sim://probed',
  replicas: 1,
  profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '0'] }],
};

describe('engines on nodes: installed, probed, offered only when they run (real agent, control plane, Temporal)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-engines-'));
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane | undefined;
  let agent: NodeAgent | undefined;
  let configFile = '';
  let origin: Origin | undefined;

  // A vLLM whose CUDA runtime is missing: the loader's own message, exit 127, before any help is printed.
  const brokenVllm = join(dir, 'vllm');
  writeFileSync(
    brokenVllm,
    `#!/bin/sh\necho "$0: error while loading shared libraries: libcudart.so.12: cannot open shared object file: No such file or directory" >&2\nexit 127\n`,
  );
  chmodSync(brokenVllm, 0o755);

  const startCp = async (engines: ServerConfig['engines']): Promise<ControlPlane> => {
    config = { ...config, engines };
    writeFileSync(configFile, stringify(config));
    return startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
  };
  const statuses = async (): Promise<EngineStatus[] | null | undefined> =>
    (await (cp as ControlPlane).store.listNodes()).find((n) => n.id === NODE)?.engineStatus;
  const ctl = async (...args: string[]): Promise<string> => {
    let out = '';
    await ctlCommand([...args, '--config', configFile], (s) => void (out += s));
    return out;
  };

  beforeAll(async () => {
    origin = await startOrigin({ size: 3 << 20, name: 'fetched.gguf' });
    temporal = await startTestTemporal();
    const fetchedModel: ModelSpec = { ...MODEL, name: 'fetched', source: origin.fileUrl, sha256: origin.sha256 };
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [MODEL, fetchedModel],
    });
    configFile = join(dir, 'server.yaml');
    cp = await startCp({ sim: '1.0.0', vllm: '', llamacpp: '' });
    await writeOperatorCert(config, cp.store);
  }, 120_000);

  afterAll(async () => {
    await agent?.close();
    await cp?.close();
    await closeCertClients();
    await temporal?.stop();
    await origin?.close();
    await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  test('a registering agent probes what server.yaml names: sim offered, a vLLM that cannot load refused with its error, llama.cpp "" without --llamacpp-bin refused with the fix', async () => {
    const { cert } = await certClient(config, (cp as ControlPlane).store, NODE);
    const t0 = Date.now();
    agent = await startAgent({
      nodeId: NODE,
      server: (cp as ControlPlane).url,
      tls: cert,
      nvidiaSmi: join(ROOT, 'test/fixtures/nvidia-smi'),
      noGpu: false,
      ibRoot: join(ROOT, 'test/fixtures/sysfs/none'),
      cpuinfo: '/proc/cpuinfo',
      fabrics: [],
      advertiseHost: '127.0.0.1',
      engineSetup: { enginesDir: join(dir, 'installs'), bins: { vllm: brokenVllm } },
      stateDir: join(dir, 'state'),
      stopEnginesOnExit: true,
      weights: { dir: join(dir, 'weights'), listen: { host: '127.0.0.1', port: 0 } },
      log: () => undefined,
    });
    // First start: nothing was probed yet, so nothing is offered until ensureEngines has run.
    expect(agent.inventory.engines).toEqual([]);
    const result = (await (cp as ControlPlane).client.workflow
      .getHandle(workflowIds.engines(NODE))
      .result()) as EngineStatus[];
    console.log(
      `ensureEngines on a fresh agent: ${Date.now() - t0} ms from agent start to recorded (sim probe, vLLM refused, llama.cpp refused)`,
    );
    const by = new Map(result.map((s) => [s.engine, s]));
    expect(by.get('sim')).toMatchObject({ state: 'offered', version: '1.0.0', from: 'builtin', reason: null });
    expect(by.get('vllm')).toMatchObject({ state: 'failed', from: 'operator' });
    expect(by.get('vllm')?.reason).toContain('libcudart.so.12: cannot open shared object file');
    expect(by.get('vllm')?.reason).toContain('exit 127');
    expect(by.get('llamacpp')).toMatchObject({ state: 'failed' });
    expect(by.get('llamacpp')?.reason).toContain('--llamacpp-bin');

    await waitFor(async () => (await statuses())?.length === 3, {
      timeoutMs: 10_000,
      what: 'the probe recorded in MySQL',
    });
    const node = (await (cp as ControlPlane).store.listNodes()).find((n) => n.id === NODE);
    expect(node?.inventory.engines).toEqual(['sim']);
    const out = await ctl('nodes');
    expect(out).toMatch(/^e1 +ready .*sim 1\.0\.0, llamacpp \? FAILED, vllm \? FAILED/m);
    expect(out).toContain('e1: vllm not offered:');
    expect(out).toContain('libcudart.so.12');
  });

  test('the offered engine serves: a sim replica placed on the node runs the program the probe recorded', async () => {
    await ctl('deploy', MODEL.name, '--timeout', '60');
    const replicas = await (cp as ControlPlane).store.listReplicas();
    expect(replicas.find((r) => r.model === MODEL.name)).toMatchObject({ state: 'ready' });
    await ctl('scale', MODEL.name, '0');
    await waitFor(
      async () =>
        (await (cp as ControlPlane).store.listReplicas()).every((r) => r.model !== MODEL.name || r.state === 'stopped'),
      { timeoutMs: 30_000, what: 'the replica to stop' },
    );
  });

  test("a model whose source is a URL: its weights are fetched into the node's cache (sha256-checked) before its engine starts, once", async () => {
    await ctl('deploy', 'fetched', '--timeout', '60');
    expect((await (cp as ControlPlane).store.listReplicas()).find((r) => r.model === 'fetched')).toMatchObject({
      state: 'ready',
    });
    const o = origin as Origin;
    expect(o.requests.filter((r) => r.status === 200 || r.status === 206)).toHaveLength(1);
    const held = readdirSync(join(dir, 'weights'), { recursive: true })
      .map(String)
      .filter((f) => f.endsWith('fetched.gguf'));
    expect(held).toHaveLength(1);
    expect(statSync(join(dir, 'weights', held[0] as string)).size).toBe(o.data.length);
    await ctl('scale', 'fetched', '0');
    await waitFor(
      async () =>
        (await (cp as ControlPlane).store.listReplicas()).every((r) => r.model !== 'fetched' || r.state === 'stopped'),
      { timeoutMs: 30_000, what: 'the replica to stop' },
    );
  });

  test('a control plane started with other engines has the node probe again, without the agent restarting', async () => {
    await (cp as ControlPlane).close();
    cp = await startCp({ sim: '1.0.0', vllm: '', llamacpp: 'latest' });
    // The plan is checked before any pip runs: llama.cpp "latest" is no build.
    const s = await waitFor(
      async () => {
        const st = await statuses();
        return st?.some((x) => x.engine === 'llamacpp' && x.version === 'latest') ? st : undefined;
      },
      { timeoutMs: 30_000, what: 'the node to be probed against the new engines' },
    );
    expect(s.find((x) => x.engine === 'llamacpp')?.reason).toContain('is not a llama.cpp build; name one like b11434');
    expect(s.find((x) => x.engine === 'sim')?.state).toBe('offered');
  }, 60_000);
});
