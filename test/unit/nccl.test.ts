/** A multi-node rank gets exactly its fabric's adapters, in NCCL's exact-match form. */
import { buildEngineCommand, type ShardLaunch } from '../../lib/engines/command';
import { ncclHcaSelects, ncclIbHca, rankFabricEnv } from '../../lib/hardware/nccl';
import type { IbAdapter } from '../../lib/types';
import { thrownWithCode } from '../helpers/errors';

const ib = (device: string, state = '4: ACTIVE'): IbAdapter => ({
  device,
  port: 1,
  state,
  rate: '400 Gb/sec (4X NDR)',
  linkLayer: 'InfiniBand',
});
// An HGX node: compute rails mlx5_0,3,4,5,6,9,10,11 on fabric ib-a; management mlx5_1,2,7,8 on ib-mgmt.
const HGX = {
  adapters: Array.from({ length: 12 }, (_, i) => ib(`mlx5_${i}`)),
  fabrics: {
    'ib-a': ['mlx5_0', 'mlx5_3', 'mlx5_4', 'mlx5_5', 'mlx5_6', 'mlx5_9', 'mlx5_10', 'mlx5_11'],
    'ib-mgmt': ['mlx5_1', 'mlx5_2', 'mlx5_7', 'mlx5_8'],
  },
};

describe('NCCL_IB_HCA for a rank', () => {
  it('is one leading = and each adapter with its port', () => {
    expect(
      rankFabricEnv(
        'gpu-01',
        { adapters: [ib('mlx5_0'), ib('mlx5_1')], fabrics: { 'ib-a': ['mlx5_0', 'mlx5_1'] } },
        'ib-a',
      ),
    ).toEqual({ NCCL_IB_HCA: '=mlx5_0:1,mlx5_1:1' });
    expect(
      ncclIbHca([
        { device: 'mlx5_2', port: 1 },
        { device: 'mlx5_3', port: 1 },
      ]),
    ).toBe('=mlx5_2:1,mlx5_3:1');
  });
  it("selects exactly its fabric's adapters: mlx5_1 never matches mlx5_10", () => {
    const mgmt = rankFabricEnv('gpu-01', HGX, 'ib-mgmt').NCCL_IB_HCA ?? '';
    const compute = rankFabricEnv('gpu-01', HGX, 'ib-a').NCCL_IB_HCA ?? '';
    for (const a of HGX.adapters) {
      expect([a.device, ncclHcaSelects(mgmt, a.device, 1)]).toEqual([
        a.device,
        HGX.fabrics['ib-mgmt'].includes(a.device),
      ]);
      expect([a.device, ncclHcaSelects(compute, a.device, 1)]).toEqual([
        a.device,
        HGX.fabrics['ib-a'].includes(a.device),
      ]);
    }
    // The bare (prefix) form is the trap the exact form avoids.
    expect(ncclHcaSelects('mlx5_1:1', 'mlx5_10', 1)).toBe(true);
    expect(ncclHcaSelects('=mlx5_1:1', 'mlx5_10', 1)).toBe(false);
  });
  it('the matcher follows NCCL: ^ excludes, ^= excludes exactly, a port narrows', () => {
    expect(ncclHcaSelects('^=mlx5_1', 'mlx5_10', 1)).toBe(true);
    expect(ncclHcaSelects('^=mlx5_1', 'mlx5_1', 1)).toBe(false);
    expect(ncclHcaSelects('^mlx5_1', 'mlx5_10', 1)).toBe(false);
    expect(ncclHcaSelects('=mlx5_0:1', 'mlx5_0', 2)).toBe(false);
    expect(ncclHcaSelects('=mlx5_0', 'mlx5_0', 2)).toBe(true);
  });
  it('uses the port sysfs reports as active', () => {
    const adapters = [
      { ...ib('mlx4_0'), port: 1, state: '1: DOWN' },
      { ...ib('mlx4_0'), port: 2 },
    ];
    expect(rankFabricEnv('gpu-01', { adapters, fabrics: { 'ib-a': ['mlx4_0'] } }, 'ib-a')).toEqual({
      NCCL_IB_HCA: '=mlx4_0:2',
    });
  });
  it('refuses a fabric the node does not declare', () => {
    expect(thrownWithCode(() => rankFabricEnv('gpu-01', HGX, 'ib-b'), 'LLMGW_BAD_REQUEST').message).toContain(
      'node gpu-01 declares no adapters on fabric ib-b (it declares: ib-a, ib-mgmt)',
    );
  });
});

describe('a shard launch', () => {
  const launch = (o: Partial<ShardLaunch>): ShardLaunch => ({
    model: 'm',
    source: 'sim://m',
    profile: { name: 'tp2', engine: 'sim', nodes: 2, gpusPerNode: 8, args: [] },
    rank: 1,
    world: 2,
    host: '10.0.0.2',
    port: 30001,
    distHost: '10.0.0.1',
    distPort: 30002,
    fabric: 'ib-mgmt',
    ...o,
  });
  const node = { nodeId: 'gpu-01', inventory: HGX };
  it("gives a multi-node rank exactly its placed fabric's adapters, in exact-match form", () => {
    const { env } = buildEngineCommand(launch({}), node);
    expect(env).toEqual({ NCCL_IB_HCA: '=mlx5_1:1,mlx5_2:1,mlx5_7:1,mlx5_8:1' });
    // Not one compute rail: mlx5_10 and mlx5_11 share mlx5_1's prefix and sit on ib-a.
    for (const d of HGX.fabrics['ib-a']) expect([d, ncclHcaSelects(env.NCCL_IB_HCA ?? '', d, 1)]).toEqual([d, false]);
    expect(buildEngineCommand(launch({ fabric: 'ib-a', rank: 0 }), node).env.NCCL_IB_HCA).toBe(
      '=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1',
    );
  });
  it("gives a single-node shard, or a launch without the node's inventory, no NCCL environment", () => {
    expect(buildEngineCommand(launch({ world: 1, fabric: null }), node).env).toEqual({});
    expect(buildEngineCommand(launch({ world: 1, fabric: undefined }), node).env).toEqual({});
    expect(buildEngineCommand(launch({}), undefined).env).toEqual({});
  });
  it('refuses a rank placed on a fabric its node does not declare', () => {
    expect(
      thrownWithCode(() => buildEngineCommand(launch({ fabric: 'ib-b' }), node), 'LLMGW_BAD_REQUEST').message,
    ).toContain('node gpu-01 declares no adapters on fabric ib-b');
  });
});
