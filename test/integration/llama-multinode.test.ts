/**
 * Multi-node llama.cpp through llmgw: two real agents on one fabric offer this machine's llama.cpp build (the
 * operator's binary); the replica workflow places the tiny generated model over both — ggml-rpc-server on the
 * worker rank, started and listening before rank 0's llama-server --rpc connects to it — and it answers through
 * the gateway. The nodes' ggml-rpc-server takes 3 s to start (a wrapper sleeps first, as a real worker loading its
 * backend does): a rank 0 started beside it would abort ("Failed to connect") and crash-loop. A worker that dies
 * takes the replica with it, in the worker's own words, and the rebuild starts the ranks in the same order. Real
 * Temporal, MariaDB, control plane, agents, engines and gateway.
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import OpenAI from 'openai';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import { readEngineState, shardKey } from '../../lib/engine-state';
import { writeTinyLlamaGguf } from '../../lib/engines/tiny-gguf';
import { QUEUES, workflowIds } from '../../lib/names';
import { parseNodeId, type EngineStatus, type NodeId, type ReplicaRecord } from '../../lib/types';
import { startAgent } from '../../workers/agent/index';
import type { Agent } from '../../workers/agent/options';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { recordHistory } from '../helpers/histories';
import { awaitLlamacpp, TINY_MODEL_ARGS } from '../helpers/llama-server';
import { waitRoutable } from '../helpers/load';
import { certClient, closeCertClients } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const ROOT = resolve(__dirname, '../..');
const MODEL = 'tiny-rpc';
const NODES = [parseNodeId('rpc-a'), parseNodeId('rpc-b')];
const TEXT = /^[a-z ]+$/;
const WORKER_DELAY_S = 3;

/** The operator's llama.cpp as the agents get it: llama-server as built, a ggml-rpc-server beside it that starts slowly. */
function slowWorkerInstall(dir: string, real: { 'llama-server': string; 'ggml-rpc-server': string }): string {
  mkdirSync(dir, { recursive: true });
  symlinkSync(real['llama-server'], join(dir, 'llama-server'));
  writeFileSync(
    join(dir, 'ggml-rpc-server'),
    `#!/bin/sh\nsleep ${WORKER_DELAY_S}\nexec ${real['ggml-rpc-server']} "$@"\n`,
  );
  chmodSync(join(dir, 'ggml-rpc-server'), 0o755);
  return join(dir, 'llama-server');
}

describe('the tiny model over two nodes: ggml-rpc-server first, then llama-server --rpc, through the gateway', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-llama-rpc-'));
  const stateDir = (n: NodeId): string => join(dir, n, 'state');
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  const agents: Agent[] = [];
  let gateway: RunningGateway;

  const replica = async (): Promise<ReplicaRecord | undefined> =>
    (await cp.store.listReplicas(MODEL)).find((r) => r.state !== 'stopped');
  const readyReplica = (what: string): Promise<ReplicaRecord> =>
    waitFor(
      async () => {
        const r = await replica();
        if (r?.state !== 'ready') throw new Error(`${r?.id ?? 'no replica'} ${r?.state ?? ''}: ${r?.reason ?? ''}`);
        return r;
      },
      { timeoutMs: 90_000, intervalMs: 250, what },
    );
  /** When each rank's engine started, from its node's engine record. */
  const startedAt = (r: ReplicaRecord, generation: number, rank: number): number => {
    const s = r.shards.find((x) => x.rank === rank);
    const st = s && readEngineState(stateDir(s.nodeId), shardKey(r.id, generation, rank));
    if (!st) throw new Error(`no engine record for ${r.id} rank ${rank} generation ${generation}`);
    return Date.parse(st.startedAt);
  };

  beforeAll(async () => {
    const llamaServer = slowWorkerInstall(join(dir, 'llama.cpp'), await awaitLlamacpp());
    const gguf = join(dir, 'tiny.gguf');
    await writeTinyLlamaGguf(gguf);
    temporal = await startTestTemporal();
    config = {
      ...(await testConfig({
        temporalAddress: temporal.address,
        mysqlUrl: testMysqlUrl(),
        catalog: [
          {
            name: MODEL,
            source: gguf,
            replicas: 1,
            profiles: [{ name: 'rpc2', engine: 'llamacpp', nodes: 2, gpusPerNode: 0, args: [...TINY_MODEL_ARGS] }],
          },
        ],
      })),
      engines: { sim: '1.0.0', llamacpp: '' },
    };
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    gateway = await startGateway({
      host: '127.0.0.1',
      port: 0,
      routing: new RoutingTable(() => cp.store.routeRows(), { refreshMs: config.gateway.refreshMs }),
      apiKeys: [],
    });
    for (const nodeId of NODES) {
      const { cert } = await certClient(config, cp.store, nodeId);
      agents.push(
        await startAgent({
          nodeId,
          server: cp.url,
          tls: cert,
          nvidiaSmi: join(ROOT, 'test/fixtures/nvidia-smi'),
          noGpu: true,
          ibRoot: join(ROOT, 'test/fixtures/sysfs/two-hdr'),
          sminfo: join(ROOT, 'test/fixtures/sminfo'),
          cpuinfo: '/proc/cpuinfo',
          fabrics: ['ib-a'],
          advertiseHost: '127.0.0.1',
          engineSetup: { enginesDir: join(dir, nodeId, 'installs'), bins: { llamacpp: llamaServer } },
          stateDir: stateDir(nodeId),
          stopEnginesOnExit: true,
          weights: { dir: join(dir, nodeId, 'weights'), listen: { host: '127.0.0.1', port: 0 } },
          log: () => undefined,
        }),
      );
      const statuses = (await cp.client.workflow.getHandle(workflowIds.engines(nodeId)).result()) as EngineStatus[];
      expect(statuses.find((s) => s.engine === 'llamacpp')).toMatchObject({ state: 'offered', from: 'operator' });
    }
  }, 22 * 60_000);

  afterAll(async () => {
    await cp?.client.workflow
      .getHandle(workflowIds.model(MODEL))
      .terminate()
      .catch(() => undefined);
    for (const r of (await cp?.store.listReplicas(MODEL).catch(() => [])) ?? [])
      await cp.client.workflow
        .getHandle(workflowIds.replica(r.id))
        .terminate()
        .catch(() => undefined);
    for (const a of agents) await a.close();
    await gateway?.close();
    await cp?.close();
    await closeCertClients();
    await temporal?.stop();
    if (config) await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  test(
    'placed over both nodes, the worker listening before rank 0 starts; answers through the gateway',
    async () => {
      await cp.client.workflow.start('modelDeployment', {
        taskQueue: QUEUES.control,
        workflowId: workflowIds.model(MODEL),
        args: [{ model: MODEL }],
      });
      const r = await readyReplica(`${MODEL} ready over two nodes`);
      expect(r.shards.map((s) => s.nodeId).sort()).toEqual([...NODES].sort());
      const worker = r.shards.find((s) => s.rank === 1);
      // Rank 0's llama-server was started once the worker's ggml-rpc-server listened, and connected to it: first time.
      expect(startedAt(r, 0, 0) - startedAt(r, 0, 1)).toBeGreaterThanOrEqual(WORKER_DELAY_S * 1000);
      expect(
        (await cp.store.recentEvents(200)).filter((e) => e.replicaId === r.id && e.kind === 'replica.rebuilding'),
      ).toEqual([]);
      const workerLog = readFileSync(join(stateDir(worker?.nodeId as NodeId), `${shardKey(r.id, 0, 1)}.log`), 'utf8');
      expect(workerLog).toMatch(/Starting RPC server/);
      expect(workerLog).toMatch(/Accepted client connection/);

      await waitRoutable(gateway.url, MODEL, 30_000);
      const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 30_000 });
      const plain = await client.chat.completions.create({
        model: MODEL,
        max_tokens: 8,
        messages: [{ role: 'user', content: 'hello over rpc' }],
      });
      expect(plain.choices[0]?.message.content).toMatch(TEXT);
      expect(plain.usage?.completion_tokens).toBe(8);
      let streamed = '';
      for await (const c of await client.chat.completions.create({
        model: MODEL,
        stream: true,
        max_tokens: 12,
        messages: [{ role: 'user', content: 'and streamed' }],
      })) {
        streamed += c.choices[0]?.delta?.content ?? '';
      }
      expect(streamed).toMatch(TEXT);
      expect(streamed.length).toBeGreaterThan(0);
    },
    3 * 60_000,
  );

  test(
    'a worker that dies fails the replica in its own words; the rebuild starts the worker first again',
    async () => {
      const before = (await replica()) as ReplicaRecord;
      const worker = before.shards.find((s) => s.rank === 1);
      const st = readEngineState(stateDir(worker?.nodeId as NodeId), shardKey(before.id, 0, 1));
      process.kill(st?.enginePid ?? 0, 'SIGKILL');
      const failed = await waitFor(
        async () =>
          (await cp.store.recentEvents(200)).find((e) => e.replicaId === before.id && e.kind === 'replica.rebuilding'),
        { timeoutMs: 30_000, what: `a replica.rebuilding event for ${before.id}` },
      );
      // Whichever noticed first: the worker's shard (killed), or rank 0, whose llama-server lost its RPC server.
      expect(failed.message).toMatch(
        /rank 1 on rpc-[ab] was killed by SIGKILL|rank 0 on rpc-[ab] (exited|was killed).*(RPC|rpc)/s,
      );
      const after = await readyReplica(`${MODEL} rebuilt and ready`);
      expect(startedAt(after, 1, 0) - startedAt(after, 1, 1)).toBeGreaterThanOrEqual(WORKER_DELAY_S * 1000);
      await waitRoutable(gateway.url, MODEL, 30_000);
      recordHistory(temporal.address, 'replica-workers-first.json', workflowIds.replica(after.id));
    },
    3 * 60_000,
  );
});
