/** `llmgw ctl fabrics` and the node list say when one fabric name covers two subnet managers, naming each side. */
import { fabricColumn, fabricsView, formatFabrics, type NodeListEntry } from '../../cli/fabrics';
import type { FabricIdentity } from '../../lib/types';

const A = '0x98039b03009fa1c0';
const B = '0xb83fd20300c1d2e0';

function node(id: string, fabrics: Record<string, string[]>, identity?: Record<string, FabricIdentity>, state: NodeListEntry['state'] = 'ready'): NodeListEntry {
  return { id: id as NodeListEntry['id'], state, inventory: { gpus: [], adapters: [], fabrics, cpuFlags: [], engines: ['sim'], host: '127.0.0.1', ...(identity ? { fabricIdentity: identity } : {}) } };
}
const sm = (smGuid: string | null): FabricIdentity => (smGuid ? { smGuid, strength: 'sm-guid', smLid: '0x1' } : { smGuid: null, strength: 'declared-only', note: 'sminfo could not open mlx5_0 port 1' });
const DEVS = ['mlx5_0', 'mlx5_1'];

describe('ctl fabrics', () => {
  const nodes = [
    node('gpu-a', { 'ib-a': DEVS }, { 'ib-a': sm(A) }),
    node('gpu-b', { 'ib-a': DEVS }, { 'ib-a': sm(B) }),
    node('gpu-c', { 'ib-a': DEVS }, { 'ib-a': sm(A) }, 'cordoned'),
    node('gpu-d', { 'ib-b': ['mlx5_2', 'mlx5_3'] }, { 'ib-b': sm(null) }),
    node('gpu-e', { 'ib-b': ['mlx5_2', 'mlx5_3'] }),
    node('cpu-a', {}),
  ];
  it('shows two fabrics under one name, naming the nodes on each side', () => {
    const v = fabricsView(nodes);
    expect(v.fabrics.map((f) => [f.key, f.smGuid, f.nodes.map((n) => n.id)])).toEqual([
      [`ib-a@${A}`, A, ['gpu-a', 'gpu-c']], [`ib-a@${B}`, B, ['gpu-b']], ['ib-b', null, ['gpu-d', 'gpu-e']],
    ]);
    expect(v.fabrics[0]?.warnings[0]).toBe(`one of 2 fabrics named ib-a (their ports see different subnet managers): a replica never spans them; the other side: SM ${B}: gpu-b`);
    expect(v.fabrics[0]?.warnings).toContain('gpu-c: cordoned');
    expect(v.fabrics[1]?.warnings[0]).toContain(`the other side: SM ${A}: gpu-a, gpu-c`);
    expect(v.fabrics[2]?.warnings).toEqual(['gpu-d, gpu-e: subnet manager not identified, name trusted as declared (weaker)']);
    expect(v.islands).toEqual(['cpu-a']);
  });
  it('prints one row per fabric, islands last', () => {
    const lines = formatFabrics(fabricsView(nodes)).split('\n');
    expect(lines[0]).toMatch(/^FABRIC\s+SUBNET MANAGER\s+NODES\s+ADAPTERS\s+WARNINGS$/);
    expect(lines[1]).toMatch(new RegExp(`^ib-a\\s+${A}\\s+gpu-a,gpu-c\\s+gpu-a:mlx5_0,mlx5_1 gpu-c:mlx5_0,mlx5_1\\s+one of 2 fabrics named ib-a`));
    expect(lines[3]).toMatch(/^ib-b\s+unknown \(declared only\)\s+gpu-d,gpu-e/);
    expect(lines[4]).toMatch(/^\(island\)\s+-\s+cpu-a\s+-\s+no fabric: single-node replicas only$/);
    expect(formatFabrics({ fabrics: [], islands: [] })).toBe('no nodes registered\n');
  });
  it('marks split and weaker fabrics in the node list cell', () => {
    expect(fabricColumn(nodes[0] as NodeListEntry, nodes)).toBe(`ib-a(mlx5_0,mlx5_1)[split: SM ${A}]`);
    expect(fabricColumn(nodes[3] as NodeListEntry, nodes)).toBe('ib-b(mlx5_2,mlx5_3)[declared only]');
    expect(fabricColumn(nodes[4] as NodeListEntry, nodes)).toBe('ib-b(mlx5_2,mlx5_3)');
    expect(fabricColumn(nodes[5] as NodeListEntry, nodes)).toBe('island');
  });
});
