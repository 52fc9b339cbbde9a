/** GPU indices: the topology matrix, which indices a shard gets, disjoint shards on one node, rows from before pinning. */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { parseTopoMatrix, linkScore } from '../../lib/hardware/gpu-topology';
import { queryComputeCaps, queryTopology } from '../../lib/hardware/nvidia';
import { freeIndices, pickGpus } from '../../lib/gpus';
import { place } from '../../lib/placement';
import { legacyGpus } from '../../lib/store/store';
import { parseNodeId, type NodeRecord, type Profile } from '../../lib/types';
import { runCommand } from '../../lib/hardware/exec';

const FAKE_SMI = join(__dirname, '../fixtures/nvidia-smi');
const fake = (env: Record<string, string>, ...args: string[]): string =>
  execFileSync(FAKE_SMI, args, { env: { ...process.env, ...env }, encoding: 'utf8' });
const withEnv = (env: Record<string, string>) => (cmd: string, args: string[]) =>
  runCommand(cmd, args, { env: { ...process.env, ...env } });

function gpuNode(id: string, gpus: number, topo?: string): NodeRecord {
  return {
    id: parseNodeId(id),
    state: 'ready',
    lastSeen: new Date(0),
    registeredAt: new Date(0),
    inventory: {
      gpus: Array.from({ length: gpus }, (_, index) => ({
        index,
        name: 'NVIDIA A100-SXM4-80GB',
        memoryMiB: 81920,
        uuid: `GPU-${id}-${index}`,
      })),
      adapters: [],
      fabrics: {},
      cpuFlags: [],
      engines: ['sim'],
      host: '127.0.0.1',
      ...(topo
        ? {
            gpuTopology: parseTopoMatrix(
              fake({ FAKE_NVIDIA_GPUS: String(gpus), FAKE_NVIDIA_TOPO: topo }, 'topo', '-m'),
            ),
          }
        : {}),
    },
  };
}
const tp2: Profile = { name: 'tp2', engine: 'sim', nodes: 1, gpusPerNode: 2, args: [] };

describe('nvidia-smi topo -m', () => {
  it('reads the fake 8-GPU matrix: NVLink-bridged pairs, PCIe within a socket, SYS across', () => {
    const t = parseTopoMatrix(fake({ FAKE_NVIDIA_GPUS: '8' }, 'topo', '-m'));
    expect(t.links).toHaveLength(8);
    expect(t.links[0]).toEqual(['X', 'NV4', 'PXB', 'PXB', 'SYS', 'SYS', 'SYS', 'SYS']);
    expect(t.links[7]?.[6]).toBe('NV4');
  });
  it('reads a real HGX layout with NIC columns, affinities and a coloured header', () => {
    const text =
      '\x1b[4m\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \tNV18\tPXB\t0-47,96-143\t0\t\tN/A\nGPU1\tNV18\t X \tSYS\t0-47,96-143\t0\t\tN/A\nNIC0\tPXB\tSYS\t X \n\nLegend:\n  X    = Self\n';
    expect(parseTopoMatrix(text).links).toEqual([
      ['X', 'NV18'],
      ['NV18', 'X'],
    ]);
  });
  it('refuses text that is no matrix, and a query of a driver without topo reports why', async () => {
    expect(() => parseTopoMatrix('Topology is not supported')).toThrow(/no GPU0 column/);
    expect(await queryTopology(FAKE_SMI, withEnv({ FAKE_NVIDIA_GPUS: '2', FAKE_NVIDIA_TOPO: 'none' }))).toEqual({
      failed: expect.stringContaining('exit 3'),
    });
  });
  it('orders links NVLink (more links closer) > PIX > PXB > PHB > NODE > SYS', () => {
    const order = ['NV12', 'NV4', 'PIX', 'PXB', 'PHB', 'NODE', 'SYS', 'weird'].map(linkScore);
    expect([...order].sort((a, b) => b - a)).toEqual(order);
  });
  it('reads compute capabilities apart from the GPU list', async () => {
    expect(await queryComputeCaps(FAKE_SMI, withEnv({ FAKE_NVIDIA_GPUS: '2', FAKE_NVIDIA_CC: '7.0' }))).toEqual(
      new Map([
        [0, '7.0'],
        [1, '7.0'],
      ]),
    );
    expect(await queryComputeCaps('/opt/none/nvidia-smi')).toEqual(new Map());
  });
});

describe('pickGpus', () => {
  const pairs = parseTopoMatrix(fake({ FAKE_NVIDIA_GPUS: '8' }, 'topo', '-m'));
  it('takes the lowest free indices without a matrix', () => {
    expect(pickGpus([1, 2, 3, 5], 2)).toEqual([1, 2]);
    expect(pickGpus([1], 2)).toBeNull();
    expect(pickGpus([4], 0)).toEqual([]);
  });
  it('prefers a pair on one NVLink bridge over the lowest free indices', () => {
    expect(pickGpus([1, 2, 3, 4, 5, 6, 7], 2, pairs)).toEqual([2, 3]);
    expect(pickGpus([1, 3, 4, 5], 2, pairs)).toEqual([4, 5]);
    expect(pickGpus([1, 3, 5, 6], 2, pairs)).toEqual([1, 3]); // no bridged pair left: PXB ties go to the lowest
  });
  it('keeps four GPUs on one socket, and takes the lowest where every link is alike', () => {
    expect(pickGpus([0, 1, 2, 4, 5, 6, 7], 4, pairs)).toEqual([4, 5, 6, 7]);
    const nvswitch = parseTopoMatrix(fake({ FAKE_NVIDIA_GPUS: '8', FAKE_NVIDIA_TOPO: 'nvswitch' }, 'topo', '-m'));
    expect(pickGpus([1, 2, 3, 4], 2, nvswitch)).toEqual([1, 2]);
  });
});

describe('GPU indices in placement', () => {
  it('four 2-GPU replicas on one 8-GPU node get disjoint pairs, each on its own NVLink bridge', () => {
    const n = gpuNode('gpu-a', 8, 'pairs');
    const held: Record<string, number[]> = {};
    const got: number[][] = [];
    for (let i = 0; i < 4; i++) {
      const r = place({ nodes: [n], profile: tp2, heldGpus: held });
      if (r.kind !== 'placed') throw new Error(r.reason);
      got.push(r.gpus[0] ?? []);
      held['gpu-a'] = [...(held['gpu-a'] ?? []), ...(r.gpus[0] ?? [])];
    }
    expect(got).toEqual([
      [0, 1],
      [2, 3],
      [4, 5],
      [6, 7],
    ]);
    const fifth = place({ nodes: [n], profile: tp2, heldGpus: held, model: 'm' });
    expect(fifth).toEqual({
      kind: 'unplaceable',
      reason: 'no node can take m/tp2 (sim, 2 GPUs): gpu-a: 0 of 2 GPUs free',
    });
  });
  it('a pair freed by a rebuild is what the next placement takes', () => {
    const r = place({ nodes: [gpuNode('gpu-a', 8, 'pairs')], profile: tp2, heldGpus: { 'gpu-a': [0, 1, 4, 5, 6, 7] } });
    expect(r).toMatchObject({ kind: 'placed', gpus: [[2, 3]] });
  });
  it("gives each rank of a multi-node replica its own node's indices, and a 0-GPU profile none", () => {
    const a = {
      ...gpuNode('gpu-a', 2),
      inventory: { ...gpuNode('gpu-a', 2).inventory, fabrics: { 'ib-a': ['mlx5_0'] } },
    };
    const b = {
      ...gpuNode('gpu-b', 2),
      inventory: { ...gpuNode('gpu-b', 2).inventory, fabrics: { 'ib-a': ['mlx5_0'] } },
    };
    expect(
      place({ nodes: [a, b], profile: { ...tp2, nodes: 2, gpusPerNode: 1 }, heldGpus: { 'gpu-b': [0] } }),
    ).toMatchObject({ nodes: ['gpu-a', 'gpu-b'], gpus: [[0], [1]] });
    expect(place({ nodes: [a], profile: { ...tp2, gpusPerNode: 0 }, heldGpus: {} })).toMatchObject({ gpus: [[]] });
  });
  it('free indices leave out held ones', () => {
    expect(freeIndices(gpuNode('gpu-a', 4).inventory, [2, 0])).toEqual([1, 3]);
  });
  it('rows placed before migration 10 hold the lowest indices no recorded shard holds', () => {
    const row = (replicaId: string, gpus: number[] | null, count: number) => ({
      replicaId,
      rank: 0,
      nodeId: parseNodeId('gpu-a'),
      port: 1,
      gpus,
      count,
    });
    expect(
      legacyGpus([row('old-0', null, 2), row('new-0', [0, 3], 2), row('old-1', null, 1)]).map((s) => s.gpus),
    ).toEqual([[1, 2], [0, 3], [4]]);
  });
});
