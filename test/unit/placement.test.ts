import { fabricGroups, place } from '../../lib/placement';
import { parseNodeId, type EngineName, type NodeRecord, type NodeState, type Profile } from '../../lib/types';

function node(
  id: string,
  o: { gpus?: number; fabric?: string | null; state?: NodeState; engines?: EngineName[]; smGuid?: string | null } = {},
): NodeRecord {
  const gpus = Array.from({ length: o.gpus ?? 1 }, (_, index) => ({
    index,
    name: 'NVIDIA A100-SXM4-80GB',
    memoryMiB: 81920,
    uuid: `GPU-${id}-${index}`,
  }));
  const fabric = o.fabric === undefined ? 'ib-a' : o.fabric;
  return {
    id: parseNodeId(id),
    state: o.state ?? 'ready',
    inventory: {
      gpus,
      adapters: [],
      fabrics: fabric ? { [fabric]: ['mlx5_0', 'mlx5_1'] } : {},
      cpuFlags: ['avx', 'avx2'],
      engines: o.engines ?? ['sim'],
      host: '127.0.0.1',
      ...(fabric && o.smGuid !== undefined
        ? { fabricIdentity: { [fabric]: { smGuid: o.smGuid, strength: o.smGuid ? 'sm-guid' : 'declared-only' } } }
        : {}),
    },
    lastSeen: new Date(0),
    registeredAt: new Date(0),
  };
}

/** GPU counts held per node as the lowest indices. */
const held = (counts: Record<string, number>): Record<string, number[]> =>
  Object.fromEntries(Object.entries(counts).map(([n, c]) => [n, Array.from({ length: c }, (_, i) => i)]));

const small: Profile = { name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: [] };
const large: Profile = { name: 'tp2', engine: 'sim', nodes: 2, gpusPerNode: 1, args: [] };

describe('place: single node', () => {
  it('picks the node with most free GPUs, ties by id, with no fabric', () => {
    const nodes = [node('sim-b', { gpus: 2 }), node('sim-a', { gpus: 2 }), node('sim-c', { gpus: 1 })];
    expect(place({ nodes, profile: small, heldGpus: {} })).toMatchObject({
      kind: 'placed',
      fabric: null,
      nodes: ['sim-a'],
    });
    expect(place({ nodes, profile: small, heldGpus: held({ 'sim-a': 1 }) })).toMatchObject({
      kind: 'placed',
      fabric: null,
      nodes: ['sim-b'],
    });
  });
  it('places on an island', () => {
    expect(place({ nodes: [node('sim-c', { fabric: null })], profile: small, heldGpus: {} })).toMatchObject({
      kind: 'placed',
      fabric: null,
      nodes: ['sim-c'],
    });
  });
  it('skips cordoned, down, excluded, engine-less and full nodes', () => {
    const nodes = [
      node('sim-a', { state: 'cordoned', gpus: 8 }),
      node('sim-b', { state: 'down', gpus: 8 }),
      node('sim-c', { gpus: 8 }),
      node('sim-d', { engines: ['vllm'], gpus: 8 }),
      node('sim-e', { gpus: 2 }),
      node('sim-f', { gpus: 1 }),
    ];
    expect(place({ nodes, profile: small, heldGpus: held({ 'sim-e': 2 }), exclude: ['sim-c'] })).toMatchObject({
      kind: 'placed',
      fabric: null,
      nodes: ['sim-f'],
    });
  });
  it('needs gpusPerNode free GPUs on the node', () => {
    const nodes = [node('sim-a', { gpus: 4 })];
    const four = { ...small, gpusPerNode: 4 };
    expect(place({ nodes, profile: four, heldGpus: {} }).kind).toBe('placed');
    expect(place({ nodes, profile: four, heldGpus: held({ 'sim-a': 1 }) }).kind).toBe('unplaceable');
  });
  it('names what each node lacks', () => {
    const nodes = [node('sim-a'), node('sim-c', { fabric: null, engines: ['llamacpp'] })];
    expect(place({ nodes, profile: small, heldGpus: held({ 'sim-a': 1 }), model: 'sim-small' })).toEqual({
      kind: 'unplaceable',
      reason: 'no node can take sim-small/default (sim, 1 GPU): sim-a: 0 of 1 GPUs free; sim-c: no engine sim',
    });
  });
  it('names cordoned, down and excluded nodes', () => {
    const nodes = [node('sim-a', { state: 'cordoned' }), node('sim-b', { state: 'down' }), node('sim-c')];
    const r = place({ nodes, profile: small, heldGpus: {}, exclude: ['sim-c'] });
    expect(r.kind).toBe('unplaceable');
    if (r.kind !== 'unplaceable') return;
    expect(r.reason).toContain('sim-a: cordoned');
    expect(r.reason).toContain('sim-b: down');
    expect(r.reason).toContain('sim-c: excluded');
  });
  it('says when no nodes are registered', () => {
    const r = place({ nodes: [], profile: small, heldGpus: {} });
    expect(r.kind === 'unplaceable' && r.reason).toContain('no nodes registered');
    const r2 = place({ nodes: [], profile: large, heldGpus: {} });
    expect(r2.kind === 'unplaceable' && r2.reason).toContain('no nodes registered');
  });
});

describe('place: a large cluster', () => {
  it('groups a refusal by reason past 20 nodes, naming a few of each, so the message stays short', () => {
    const nodes = [
      ...Array.from({ length: 300 }, (_, i) => node(`gpu-${i}`)),
      ...Array.from({ length: 5 }, (_, i) => node(`off-${i}`, { state: 'cordoned' })),
    ];
    const r = place({ nodes, profile: { ...small, engine: 'vllm' }, heldGpus: {} });
    expect(r.kind === 'unplaceable' && r.reason).toBe(
      'no node can take default (vllm, 1 GPU): 300 nodes no engine vllm (gpu-0, gpu-1, gpu-2, …); 5 nodes cordoned (off-0, off-1, off-2, …)',
    );
  });
  it('picks the same node as sorting would: islands first, then most free GPUs, then the lowest id', () => {
    const nodes = [
      node('nb', { gpus: 4 }),
      node('na', { gpus: 4 }),
      node('nd', { gpus: 2, fabric: null }),
      node('nc', { gpus: 2, fabric: null }),
    ];
    expect(place({ nodes, profile: small, heldGpus: {} })).toMatchObject({ kind: 'placed', nodes: ['nc'] });
    expect(place({ nodes, profile: { ...small, gpusPerNode: 3 }, heldGpus: {} })).toMatchObject({ nodes: ['na'] });
    expect(place({ nodes, profile: { ...small, gpusPerNode: 3 }, heldGpus: held({ na: 2 }) })).toMatchObject({
      nodes: ['nb'],
    });
  });
});

describe('place: multi node', () => {
  it('places all ranks on one fabric, rank 0 with most free GPUs', () => {
    const nodes = [node('sim-a', { gpus: 1 }), node('sim-b', { gpus: 2 }), node('sim-c', { fabric: null, gpus: 8 })];
    expect(place({ nodes, profile: large, heldGpus: {} })).toMatchObject({
      kind: 'placed',
      fabric: 'ib-a',
      nodes: ['sim-b', 'sim-a'],
    });
  });
  it('never uses islands', () => {
    const nodes = [node('sim-a'), node('sim-c', { fabric: null }), node('sim-d', { fabric: null })];
    expect(place({ nodes, profile: large, heldGpus: {} }).kind).toBe('unplaceable');
  });
  it('never mixes fabrics', () => {
    const nodes = [node('sim-a', { fabric: 'ib-a' }), node('sim-b', { fabric: 'ib-b' })];
    expect(place({ nodes, profile: large, heldGpus: {} }).kind).toBe('unplaceable');
  });
  it('chooses the fabric with most usable nodes, ties by name', () => {
    const nodes = [
      node('sim-a', { fabric: 'ib-a' }),
      node('sim-b', { fabric: 'ib-a' }),
      node('sim-c', { fabric: 'ib-b' }),
      node('sim-d', { fabric: 'ib-b' }),
      node('sim-e', { fabric: 'ib-b' }),
    ];
    expect(place({ nodes, profile: large, heldGpus: {} })).toMatchObject({
      kind: 'placed',
      fabric: 'ib-b',
      nodes: ['sim-c', 'sim-d'],
    });
    expect(place({ nodes, profile: large, heldGpus: held({ 'sim-c': 1, 'sim-d': 1 }) })).toMatchObject({
      kind: 'placed',
      fabric: 'ib-a',
      nodes: ['sim-a', 'sim-b'],
    });
    expect(place({ nodes: nodes.slice(0, 4), profile: large, heldGpus: {} })).toMatchObject({
      kind: 'placed',
      fabric: 'ib-a',
      nodes: ['sim-a', 'sim-b'],
    });
  });
  it('skips cordoned, down, excluded and engine-less nodes on the fabric', () => {
    const nodes = [
      node('sim-a', { state: 'cordoned' }),
      node('sim-b', { state: 'down' }),
      node('sim-c'),
      node('sim-d', { engines: ['vllm'] }),
      node('sim-e'),
      node('sim-f'),
    ];
    expect(place({ nodes, profile: large, heldGpus: {}, exclude: ['sim-c'] })).toMatchObject({
      kind: 'placed',
      fabric: 'ib-a',
      nodes: ['sim-e', 'sim-f'],
    });
  });
  it('names the fabric shortfall, each blocked node and the islands', () => {
    const nodes = [node('sim-b', { state: 'cordoned' }), node('sim-a'), node('sim-c', { fabric: null })];
    expect(place({ nodes, profile: large, heldGpus: held({ 'sim-a': 1 }), model: 'sim-large' })).toEqual({
      kind: 'unplaceable',
      reason:
        'no placement for sim-large/tp2 (sim, 2 nodes × 1 GPU on one fabric): fabric ib-a has 0 of 2 usable nodes (sim-b: cordoned; sim-a: 0 of 1 GPUs free); sim-c is an island (no fabric): single-node replicas only',
    });
  });
  it('reports one usable node of two', () => {
    const nodes = [node('sim-a'), node('sim-b', { state: 'cordoned' }), node('sim-c', { fabric: null })];
    const r = place({ nodes, profile: large, heldGpus: {}, model: 'sim-large' });
    expect(r.kind === 'unplaceable' && r.reason).toBe(
      'no placement for sim-large/tp2 (sim, 2 nodes × 1 GPU on one fabric): fabric ib-a has 1 of 2 usable nodes (sim-b: cordoned); sim-c is an island (no fabric): single-node replicas only',
    );
  });
  it('says when no node declares a fabric', () => {
    const r = place({
      nodes: [node('sim-c', { fabric: null }), node('sim-d', { fabric: null })],
      profile: large,
      heldGpus: {},
    });
    expect(r.kind === 'unplaceable' && r.reason).toMatch(/no node declares a fabric.*sim-c, sim-d are islands/);
  });
});

describe('place: one fabric name, two subnet managers', () => {
  const A = '0x98039b03009fa1c0';
  const B = '0xb83fd20300c1d2e0';
  it('never puts one replica across nodes that declare ib-a but see different SMs, and says why naming each side', () => {
    const nodes = [node('sim-a', { smGuid: A }), node('sim-b', { smGuid: B })];
    expect(place({ nodes, profile: large, heldGpus: {}, model: 'sim-large' })).toEqual({
      kind: 'unplaceable',
      reason: `no placement for sim-large/tp2 (sim, 2 nodes × 1 GPU on one fabric): fabric ib-a is 2 fabrics under one name (its nodes see different subnet managers, and a replica never spans them): SM ${A}: sim-a (1 of 2 usable); SM ${B}: sim-b (1 of 2 usable)`,
    });
  });
  it('places inside the side that has enough nodes', () => {
    const nodes = [
      node('sim-a', { smGuid: A }),
      node('sim-b', { smGuid: B, gpus: 8 }),
      node('sim-c', { smGuid: A }),
      node('sim-d', { smGuid: B, state: 'cordoned' }),
    ];
    expect(place({ nodes, profile: large, heldGpus: {} })).toMatchObject({
      kind: 'placed',
      fabric: 'ib-a',
      nodes: ['sim-a', 'sim-c'],
    });
    const r = place({ nodes, profile: large, heldGpus: held({ 'sim-c': 1 }) });
    expect(r.kind === 'unplaceable' && r.reason).toContain(`SM ${B}: sim-b, sim-d (1 of 2 usable; sim-d: cordoned)`);
  });
  it('leaves nodes whose SM is unknown out of a split name: they may be on either side', () => {
    const nodes = [
      node('sim-a', { smGuid: A }),
      node('sim-b', { smGuid: B }),
      node('sim-c', { smGuid: null }),
      node('sim-d'),
    ];
    const r = place({ nodes, profile: large, heldGpus: {} });
    expect(r.kind === 'unplaceable' && r.reason).toContain(
      'SM unknown: sim-c, sim-d (not used: which side they are on is unknown;',
    );
    expect(place({ nodes: [...nodes, node('sim-e', { smGuid: A })], profile: large, heldGpus: {} })).toMatchObject({
      kind: 'placed',
      fabric: 'ib-a',
      nodes: ['sim-a', 'sim-e'],
    });
  });
  it('one GUID plus nodes without identity is one fabric, as before', () => {
    const nodes = [node('sim-a', { smGuid: A }), node('sim-b'), node('sim-c', { smGuid: null })];
    expect(place({ nodes, profile: { ...large, nodes: 3 }, heldGpus: {} })).toMatchObject({
      kind: 'placed',
      fabric: 'ib-a',
      nodes: ['sim-a', 'sim-b', 'sim-c'],
    });
  });
  it('fabricGroups names each side', () => {
    const groups = fabricGroups([
      node('sim-a', { smGuid: B }),
      node('sim-b', { smGuid: A }),
      node('sim-c', { fabric: 'ib-b' }),
    ]);
    expect(groups.map((g) => [g.key, g.split, g.members.map((n) => n.id)])).toEqual([
      [`ib-a@${A}`, true, ['sim-b']],
      [`ib-a@${B}`, true, ['sim-a']],
      ['ib-b', false, ['sim-c']],
    ]);
  });
});
