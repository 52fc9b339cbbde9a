/** Whether a node can be removed: each replica on it must fit elsewhere, one move after the other. */
import { removalBlockers, removalRefusal } from '../../lib/removal';
import { parseNodeId, type ModelSpec, type NodeRecord, type ReplicaRecord, type ReplicaId } from '../../lib/types';

const node = (id: string, gpus: number, state: NodeRecord['state'] = 'ready'): NodeRecord => ({
  id: parseNodeId(id),
  state,
  lastSeen: new Date(0),
  registeredAt: new Date(0),
  inventory: {
    gpus: Array.from({ length: gpus }, (_, index) => ({
      index,
      name: 'A100',
      memoryMiB: 1,
      uuid: `GPU-${id}-${index}`,
    })),
    adapters: [],
    fabrics: {},
    cpuFlags: [],
    engines: ['sim'],
    host: '127.0.0.1',
  },
});
const model = (name: string): ModelSpec => ({
  name,
  source: `sim://${name}`,
  replicas: 1,
  profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: [] }],
});
const replica = (id: string, m: string, nodeId: string, gpu: number): ReplicaRecord => ({
  id: id as ReplicaId,
  model: m,
  profile: 'default',
  state: 'ready',
  reason: null,
  endpoint: null,
  updatedAt: new Date(0),
  shards: [{ rank: 0, nodeId: parseNodeId(nodeId), port: 1, gpus: [gpu] }],
});

describe('removalBlockers', () => {
  it('lets a node go whose replicas fit elsewhere', () => {
    const o = {
      nodes: [node('gpu-a', 1), node('gpu-b', 1)],
      replicas: [replica('m-0', 'm', 'gpu-a', 0)],
      models: [model('m')],
      heldGpus: { 'gpu-a': [0] },
    };
    expect(removalBlockers('gpu-a', o)).toEqual([]);
  });
  it('names the last replica of a model that fits nowhere else, and why', () => {
    const o = {
      nodes: [node('gpu-a', 1), node('gpu-b', 1, 'cordoned')],
      replicas: [replica('m-0', 'm', 'gpu-a', 0)],
      models: [model('m')],
      heldGpus: { 'gpu-a': [0] },
    };
    const b = removalBlockers('gpu-a', o);
    expect(b).toEqual([
      { replicaId: 'm-0', model: 'm', last: true, reason: 'no node can take m/default (sim, 1 GPU): gpu-b: cordoned' },
    ]);
    expect(removalRefusal('gpu-a', b)).toBe(
      'gpu-a holds the last replica of m (m-0), and it fits nowhere else: no node can take m/default (sim, 1 GPU): gpu-b: cordoned. ' +
        'Add capacity, scale m down, or remove gpu-a with --force (m then stops serving until a node can take it)',
    );
  });
  it('counts each move against the next: two replicas, one free GPU elsewhere', () => {
    const o = {
      nodes: [node('gpu-a', 2), node('gpu-b', 2)],
      models: [model('m'), model('n')],
      replicas: [replica('m-0', 'm', 'gpu-a', 0), replica('n-0', 'n', 'gpu-a', 1), replica('m-1', 'm', 'gpu-b', 0)],
      heldGpus: { 'gpu-a': [0, 1], 'gpu-b': [0] },
    };
    expect(removalBlockers('gpu-a', o)).toEqual([
      {
        replicaId: 'n-0',
        model: 'n',
        last: true,
        reason: 'no node can take n/default (sim, 1 GPU): gpu-b: 0 of 1 GPUs free',
      },
    ]);
  });
  it('a replica whose model runs elsewhere too is not the last', () => {
    const o = {
      nodes: [node('gpu-a', 1), node('gpu-b', 1)],
      replicas: [replica('m-0', 'm', 'gpu-a', 0), replica('m-1', 'm', 'gpu-b', 0)],
      models: [model('m')],
      heldGpus: { 'gpu-a': [0], 'gpu-b': [0] },
    };
    const b = removalBlockers('gpu-a', o);
    expect(b.map((x) => [x.replicaId, x.last])).toEqual([['m-0', false]]);
    expect(removalRefusal('gpu-a', b)).toMatch(
      /^m-0 of m would not be replaced, and it fits nowhere else: .*remove gpu-a with --force$/,
    );
  });
});
