/**
 * Real inference end to end: a real agent installs llama.cpp (the pinned build, from this machine's wheelhouse,
 * offline, as a node would), probes and offers it; llmgw places the tiny generated model on that node as a
 * replica; its real llama-server answers a streamed and a non-streamed chat completion through the gateway,
 * with the OpenAI client. Real Temporal, MariaDB, control plane, agent and gateway.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import OpenAI from 'openai';
import { stringify } from 'yaml';
import { ctlCommand } from '../../cli/ctl/index';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import { PINNED_ENGINES } from '../../config/defaults';
import type { ServerConfig } from '../../config/types';
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import { llamacppWheelhouse } from '../../lib/engines/llamacpp-install';
import { writeTinyLlamaGguf } from '../../lib/engines/tiny-gguf';
import { workflowIds } from '../../lib/names';
import { parseNodeId, type EngineStatus, type ModelSpec } from '../../lib/types';
import { startAgent } from '../../workers/agent/index';
import type { Agent } from '../../workers/agent/options';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { awaitLlamacpp, TINY_MODEL_ARGS } from '../helpers/llama-server';
import { waitRoutable } from '../helpers/load';
import { certClient, closeCertClients, writeOperatorCert } from '../helpers/tls';

const ROOT = resolve(__dirname, '../..');
const NODE = parseNodeId('llama-1');
const MODEL = 'tiny-llama';
// The tiny model writes only a-z and spaces and never ends a reply itself (lib/engines/tiny-gguf.ts).
const TEXT = /^[a-z ]+$/;

describe('the tiny model on a real llama-server, installed and placed by llmgw, through the gateway', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-llama-gw-'));
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let agent: Agent | undefined;
  let gateway: RunningGateway;
  let configFile = '';
  const ctl = async (...args: string[]): Promise<string> => {
    let out = '';
    await ctlCommand([...args, '--config', configFile], (s) => void (out += s));
    return out;
  };

  beforeAll(async () => {
    // On a fresh machine set-up's background build may still run: wait for it (bounded, failing with its log).
    await awaitLlamacpp();
    const gguf = join(dir, 'tiny.gguf');
    await writeTinyLlamaGguf(gguf);
    const spec: ModelSpec = {
      name: MODEL,
      source: gguf,
      replicas: 1,
      profiles: [{ name: 'cpu', engine: 'llamacpp', nodes: 1, gpusPerNode: 0, args: [...TINY_MODEL_ARGS] }],
    };
    temporal = await startTestTemporal();
    config = {
      ...(await testConfig({ temporalAddress: temporal.address, mysqlUrl: testMysqlUrl(), catalog: [spec] })),
      engines: { sim: '1.0.0', llamacpp: PINNED_ENGINES.llamacpp },
    };
    configFile = join(dir, 'server.yaml');
    writeFileSync(configFile, stringify(config));
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    await writeOperatorCert(config, cp.store);
    gateway = await startGateway({
      host: '127.0.0.1',
      port: 0,
      routing: new RoutingTable(() => cp.store.routeRows(), { refreshMs: config.gateway.refreshMs }),
      apiKeys: [],
    });
  }, 22 * 60_000);

  afterAll(async () => {
    await cp?.client.workflow
      .getHandle(workflowIds.model(MODEL))
      .terminate()
      .catch(() => undefined);
    await agent?.close();
    await gateway?.close();
    await cp?.close();
    await closeCertClients();
    await temporal?.stop();
    if (config) await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  test(
    'the agent installs the pinned llama.cpp from the wheelhouse (offline), probes it and offers it',
    async () => {
      const { cert } = await certClient(config, cp.store, NODE);
      const t0 = Date.now();
      agent = await startAgent({
        nodeId: NODE,
        server: cp.url,
        tls: cert,
        nvidiaSmi: join(ROOT, 'test/fixtures/nvidia-smi'),
        noGpu: true,
        ibRoot: join(ROOT, 'test/fixtures/sysfs/none'),
        cpuinfo: '/proc/cpuinfo',
        fabrics: [],
        advertiseHost: '127.0.0.1',
        engineSetup: { enginesDir: join(dir, 'installs'), bins: {}, wheelhouse: llamacppWheelhouse() },
        stateDir: join(dir, 'state'),
        stopEnginesOnExit: true,
        weights: { dir: join(dir, 'weights'), listen: { host: '127.0.0.1', port: 0 } },
        log: () => undefined,
      });
      const result = (await cp.client.workflow.getHandle(workflowIds.engines(NODE)).result()) as EngineStatus[];
      console.log(
        `ensureEngines: llama.cpp ${PINNED_ENGINES.llamacpp} installed from the wheelhouse, probed and offered ${Date.now() - t0} ms after the agent started`,
      );
      const llama = result.find((s) => s.engine === 'llamacpp');
      expect(llama).toMatchObject({ state: 'offered', version: PINNED_ENGINES.llamacpp, from: 'pip', reason: null });
      expect((await cp.store.listNodes()).find((n) => n.id === NODE)?.inventory.engines).toContain('llamacpp');
      expect(await ctl('nodes')).toMatch(new RegExp(`^llama-1 +ready .*llamacpp ${PINNED_ENGINES.llamacpp}`, 'm'));
    },
    5 * 60_000,
  );

  test(
    'llmgw places the model on the node; a streamed and a plain chat completion come back through the gateway',
    async () => {
      const t0 = Date.now();
      await ctl('deploy', MODEL, '--timeout', '90');
      console.log(
        `ctl deploy ${MODEL}: ready ${Date.now() - t0} ms after the deploy started (placed, weights found on the node, llama-server loaded)`,
      );
      const replica = (await cp.store.listReplicas(MODEL))[0];
      expect(replica).toMatchObject({ state: 'ready' });
      expect(replica?.shards.map((s) => s.nodeId)).toEqual([NODE]);

      const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 30_000 });
      // The gateway refreshes its routes every refreshMs: the replica just became ready.
      let models: string[] = [];
      for (let i = 0; i < 50 && !models.includes(MODEL); i++) {
        models = (await client.models.list()).data.map((m) => m.id);
        if (!models.includes(MODEL)) await new Promise((r) => setTimeout(r, 100));
      }
      expect(models).toContain(MODEL);
      // /v1/models lists the catalog's models; a route to the ready replica comes with the next refresh.
      await waitRoutable(gateway.url, MODEL, 30_000);

      const stream = await client.chat.completions.create({
        model: MODEL,
        stream: true,
        max_tokens: 16,
        stream_options: { include_usage: true },
        messages: [{ role: 'user', content: 'hello there' }],
      });
      let text = '';
      let chunks = 0;
      let usage: { completion_tokens: number; prompt_tokens: number } | null | undefined;
      for await (const c of stream) {
        text += c.choices[0]?.delta?.content ?? '';
        if (c.choices[0]?.delta?.content) chunks++;
        if (c.usage) usage = c.usage;
      }
      expect(chunks).toBeGreaterThanOrEqual(8);
      expect(text).toMatch(TEXT);
      expect(usage?.completion_tokens).toBe(16);
      expect(usage?.prompt_tokens).toBeGreaterThan(0);

      const plain = await client.chat.completions.create({
        model: MODEL,
        max_tokens: 8,
        messages: [{ role: 'user', content: 'again' }],
      });
      expect(plain.model).toBe(MODEL);
      expect(plain.choices[0]?.message.content).toMatch(TEXT);
      expect(plain.usage?.completion_tokens).toBe(8);
    },
    3 * 60_000,
  );
});
