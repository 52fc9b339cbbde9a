/** Each engine's launch: a single-node shard, and every rank of a multi-node replica. */
import { buildEngineCommand, type LaunchNode, type ShardLaunch } from '../../lib/engines/command';
import type { EngineName } from '../../lib/types';
import { thrownWithCode } from '../helpers/errors';

const ib = (device: string) => ({
  device,
  port: 1,
  state: '4: ACTIVE',
  rate: '400 Gb/sec (4X NDR)',
  linkLayer: 'InfiniBand',
});
const node = (nodeId: string): LaunchNode => ({
  nodeId,
  inventory: { adapters: [ib('mlx5_0'), ib('mlx5_1')], fabrics: { 'ib-a': ['mlx5_0', 'mlx5_1'] } },
});
const HOSTS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];

function single(engine: EngineName, args: string[] = []): ShardLaunch {
  return {
    model: 'qwen',
    source: '/models/qwen.gguf',
    profile: { name: 'one', engine, nodes: 1, gpusPerNode: 2, args },
    rank: 0,
    world: 1,
    host: '10.0.0.1',
    port: 20000,
    behindDoor: true, // the node runs a door (the test at the end: without one)
    distHost: '10.0.0.1',
    distPort: 0,
    fabric: null,
    gpus: [2, 3],
  };
}

/** Rank `rank` of a 3-node replica, 8 GPUs per node, on fabric ib-a; rank 0 leased 20000 (API) and 20001 (dist). */
function rankOf(engine: EngineName, rank: number, args: string[] = []): ShardLaunch {
  return {
    model: 'big',
    source: '/models/big',
    modelPath: '/cache/big',
    profile: { name: 'pp3', engine, nodes: 3, gpusPerNode: 8, args },
    rank,
    world: 3,
    host: HOSTS[rank] ?? '',
    port: 20000 + rank * 10,
    behindDoor: true,
    distHost: HOSTS[0] ?? '',
    distPort: 20001,
    fabric: 'ib-a',
    gpus: [0, 1, 2, 3, 4, 5, 6, 7],
    peers: HOSTS.map((host, r) => ({ host, port: 20000 + r * 10 })),
  };
}

describe('llama.cpp', () => {
  it("single node: llama-server on its host, port and GPUs, named as the model, then the profile's args", () => {
    const c = buildEngineCommand(single('llamacpp', ['--ctx-size', '8192']));
    expect(c).toEqual({
      engine: 'llamacpp',
      program: 'llama-server',
      args: [
        '--model',
        '/models/qwen.gguf',
        '--host',
        '127.0.0.1', // the API on loopback: the node's door reaches it,
        '--port',
        '20000',
        '--alias',
        'qwen',
        '--metrics',
        '--ctx-size',
        '8192',
      ],
      env: { CUDA_VISIBLE_DEVICES: '2,3' },
    });
  });
  it("multi-node: rank 0 runs llama-server over every worker's ggml-rpc-server; workers run ggml-rpc-server on their own address", () => {
    const r0 = buildEngineCommand(rankOf('llamacpp', 0, ['-ngl', 'all']), node('n1'));
    expect(r0.program).toBe('llama-server');
    expect(r0.args).toEqual([
      '--model',
      '/cache/big',
      '--host',
      '127.0.0.1', // the API on loopback: the node's door reaches it,
      '--port',
      '20000',
      '--alias',
      'big',
      '--metrics',
      '--rpc',
      '10.0.0.2:20010,10.0.0.3:20020',
      '-ngl',
      'all',
    ]);
    expect(r0.env).toEqual({ NCCL_IB_HCA: '=mlx5_0:1,mlx5_1:1', CUDA_VISIBLE_DEVICES: '0,1,2,3,4,5,6,7' });
    for (const rank of [1, 2]) {
      const w = buildEngineCommand(rankOf('llamacpp', rank, ['-ngl', 'all']), node(`n${rank + 1}`));
      // The profile's args are llama-server's; ggml-rpc-server would refuse them.
      expect([rank, w.program, w.args]).toEqual([
        rank,
        'ggml-rpc-server',
        ['--host', HOSTS[rank], '--port', String(20000 + rank * 10)],
      ]);
      expect(w.env.CUDA_VISIBLE_DEVICES).toBe('0,1,2,3,4,5,6,7');
    }
  });
  it("refuses a multi-node rank 0 that does not know its workers' addresses", () => {
    const l = { ...rankOf('llamacpp', 0), peers: undefined };
    expect(thrownWithCode(() => buildEngineCommand(l), 'LLMGW_BAD_REQUEST').message).toContain(
      "needs every worker rank's address",
    );
  });
});

describe('vLLM', () => {
  it("single node: vllm serve MODEL, tensor parallel over the shard's GPUs", () => {
    const c = buildEngineCommand(single('vllm', ['--max-model-len', '4096']));
    expect(c).toEqual({
      engine: 'vllm',
      program: 'vllm',
      args: [
        'serve',
        '/models/qwen.gguf',
        '--host',
        '127.0.0.1', // the API on loopback: the node's door reaches it,
        '--port',
        '20000',
        '--served-model-name',
        'qwen',
        '--tensor-parallel-size',
        '2',
        '--max-model-len',
        '4096',
      ],
      env: { CUDA_VISIBLE_DEVICES: '2,3' },
    });
  });
  it('multi-node: tp per node, pp over nodes, mp rendezvous at rank 0; worker ranks headless without an API', () => {
    const parallel = ['--tensor-parallel-size', '8', '--pipeline-parallel-size', '3', '--nnodes', '3'];
    const r0 = buildEngineCommand(rankOf('vllm', 0), node('n1'));
    expect(r0.args).toEqual([
      'serve',
      '/cache/big',
      '--host',
      '127.0.0.1', // the API on loopback: the node's door reaches it,
      '--port',
      '20000',
      '--served-model-name',
      'big',
      ...parallel,
      '--node-rank',
      '0',
      '--master-addr',
      '10.0.0.1',
      '--master-port',
      '20001',
    ]);
    expect(r0.env.NCCL_IB_HCA).toBe('=mlx5_0:1,mlx5_1:1');
    for (const rank of [1, 2]) {
      const w = buildEngineCommand(rankOf('vllm', rank), node(`n${rank + 1}`));
      expect([rank, w.args]).toEqual([
        rank,
        [
          'serve',
          '/cache/big',
          ...parallel,
          '--node-rank',
          String(rank),
          '--master-addr',
          '10.0.0.1',
          '--master-port',
          '20001',
          '--headless',
        ],
      ]);
      expect(w.env).toEqual({ NCCL_IB_HCA: '=mlx5_0:1,mlx5_1:1', CUDA_VISIBLE_DEVICES: '0,1,2,3,4,5,6,7' });
    }
  });
});

describe('SGLang', () => {
  it("single node: python -m sglang.launch_server, --tp-size the shard's GPUs", () => {
    const c = buildEngineCommand(single('sglang', ['--mem-fraction-static', '0.8']));
    expect(c).toEqual({
      engine: 'sglang',
      program: 'python',
      args: [
        '-m',
        'sglang.launch_server',
        '--model-path',
        '/models/qwen.gguf',
        '--host',
        '127.0.0.1', // the API on loopback: the node's door reaches it,
        '--port',
        '20000',
        '--served-model-name',
        'qwen',
        '--enable-metrics',
        '--tp-size',
        '2',
        '--mem-fraction-static',
        '0.8',
      ],
      env: { CUDA_VISIBLE_DEVICES: '2,3' },
    });
  });
  it('multi-node: every rank the same launch with its --node-rank, --tp-size over all nodes, --dist-init-addr rank 0', () => {
    for (const rank of [0, 1, 2]) {
      const c = buildEngineCommand(rankOf('sglang', rank), node(`n${rank + 1}`));
      expect([rank, c.args]).toEqual([
        rank,
        [
          '-m',
          'sglang.launch_server',
          '--model-path',
          '/cache/big',
          '--host',
          '127.0.0.1', // every rank's API on loopback; ranks meet at --dist-init-addr
          '--port',
          String(20000 + rank * 10),
          '--served-model-name',
          'big',
          '--enable-metrics',
          '--tp-size',
          '24',
          '--nnodes',
          '3',
          '--node-rank',
          String(rank),
          '--dist-init-addr',
          '10.0.0.1:20001',
        ],
      ]);
      expect(c.env).toEqual({ NCCL_IB_HCA: '=mlx5_0:1,mlx5_1:1', CUDA_VISIBLE_DEVICES: '0,1,2,3,4,5,6,7' });
    }
  });
});

describe('every engine', () => {
  it("gives no CUDA_VISIBLE_DEVICES when the launch names no GPUs (the engine sees the node's)", () => {
    for (const engine of ['sim', 'llamacpp', 'vllm', 'sglang'] as const) {
      expect([engine, buildEngineCommand({ ...single(engine), gpus: undefined }).env]).toEqual([engine, {}]);
    }
  });
});

test('without a door (llmgw agent with no --door) every engine API listens on the node address, as gateways reach it', () => {
  for (const engine of ['sim', 'llamacpp', 'vllm', 'sglang'] as EngineName[]) {
    const { args } = buildEngineCommand({ ...single(engine), behindDoor: false });
    expect(args[args.indexOf('--host') + 1]).toBe('10.0.0.1');
  }
});
