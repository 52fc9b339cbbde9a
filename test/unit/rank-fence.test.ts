/**
 * The rank fence's pure parts: the nft scripts it writes, its reading of `nft -j list table` (a capture of nft
 * 1.0.6's own output), the checks of a RankFence over a stand-in nft, and each engine's rank ports.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ENGINE_SPECS } from '../../lib/engines/registry';
import type { ShardLaunch } from '../../lib/engines/launch';
import {
  emptyTable,
  fenceAvailable,
  installScript,
  parseTable,
  peerAddresses,
  RankFence,
  removeScript,
  type NftRunner,
} from '../../lib/rank-fence';

const captured = readFileSync(join(__dirname, '../fixtures/nft/llmgw-table.json'), 'utf8');

describe('parseTable', () => {
  test("reads nft's JSON: base, each shard chain's accepted addresses, each port's chain", () => {
    const t = parseTable(captured);
    expect(t.base).toBe(true);
    expect([...t.chains]).toEqual([
      ['qwen-0.g0.r1', ['10.1.0.2', '10.1.0.3', 'fd00::2']],
      ['tiny-1.g2.r0', ['10.1.0.4']],
    ]);
    expect([...t.ports]).toEqual([
      [7001, 'qwen-0.g0.r1'],
      [7105, 'tiny-1.g2.r0'],
    ]);
  });

  test('no output is an empty table; a table without its input chain is not a base', () => {
    expect(parseTable('')).toEqual(emptyTable());
    const doc = JSON.parse(captured) as { nftables: Record<string, unknown>[] };
    const noInput = doc.nftables.filter((i) => !('chain' in i && (i.chain as { name: string }).name === 'input'));
    expect(parseTable(JSON.stringify({ nftables: noInput })).base).toBe(false);
  });

  test('output that is not nft -j is refused', () => {
    expect(() => parseTable('{"tables": []}')).toThrow(/no "nftables" array/);
  });
});

describe('installScript', () => {
  test('declares the base, rewrites the chain with the peers, points the ports at it', () => {
    const s = installScript(
      { key: 'm-0.g1.r1', ports: [7001], peers: ['10.0.0.1', '10.0.0.2', 'fd00::1'] },
      emptyTable(),
    );
    expect(s).toBe(
      [
        'add table inet llmgw',
        'add map inet llmgw rank_ports { type inet_service : verdict ; }',
        'add chain inet llmgw input { type filter hook input priority filter - 10 ; policy accept ; }',
        'flush chain inet llmgw input',
        'add rule inet llmgw input iif lo accept',
        'add rule inet llmgw input tcp dport vmap @rank_ports',
        'add chain inet llmgw rank-m-0.g1.r1',
        'flush chain inet llmgw rank-m-0.g1.r1',
        'add rule inet llmgw rank-m-0.g1.r1 ip saddr { 10.0.0.1, 10.0.0.2 } accept',
        'add rule inet llmgw rank-m-0.g1.r1 ip6 saddr { fd00::1 } accept',
        'add rule inet llmgw rank-m-0.g1.r1 reject with tcp reset',
        'add element inet llmgw rank_ports { 7001 : jump rank-m-0.g1.r1 }',
        '',
      ].join('\n'),
    );
  });

  test("takes over a port a stale shard's chain held, and releases the shard's own ports it no longer names", () => {
    const now = parseTable(captured);
    const s = installScript({ key: 'qwen-0.g0.r1', ports: [7105], peers: ['10.1.0.2'] }, now);
    expect(s).toContain('delete element inet llmgw rank_ports { 7001, 7105 }\n');
    expect(s).toMatch(/add element inet llmgw rank_ports \{ 7105 : jump rank-qwen-0\.g0\.r1 \}\n$/);
  });

  test('refuses a peer that is not an IP address, a bad port and a key nft would not take', () => {
    expect(() => installScript({ key: 'm-0.g0.r0', ports: [7001], peers: ['node-b'] }, emptyTable())).toThrow(
      /peer "node-b" is not an IP address/,
    );
    expect(() => installScript({ key: 'm-0.g0.r0', ports: [0], peers: [] }, emptyTable())).toThrow(/not a port/);
    expect(() => installScript({ key: 'm 0;flush ruleset', ports: [1], peers: [] }, emptyTable())).toThrow(
      /not a shard key/,
    );
  });
});

describe('removeScript', () => {
  test("deletes the shard's ports, then its chain; nothing when the table has none of it", () => {
    const now = parseTable(captured);
    expect(removeScript('tiny-1.g2.r0', now)).toBe(
      'delete element inet llmgw rank_ports { 7105 }\ndelete chain inet llmgw rank-tiny-1.g2.r0\n',
    );
    expect(removeScript('gone-0.g0.r1', now)).toBeNull();
  });
});

/** A stand-in nft: records scripts, answers list with `table()`. */
function fakeNft(table: () => string): { run: NftRunner; scripts: string[] } {
  const scripts: string[] = [];
  return {
    scripts,
    run: async (args, stdin) => {
      if (args[0] === '-f') scripts.push(stdin ?? '');
      return args.includes('list') ? table() : '';
    },
  };
}

describe('RankFence', () => {
  test('an install that does not read back as written fails with LLMGW_RANK_FENCE_FAILED', async () => {
    const nft = fakeNft(() => '');
    await expect(
      new RankFence(nft.run).install({ key: 'a-0.g0.r1', ports: [7001], peers: ['10.0.0.1'] }),
    ).rejects.toMatchObject({
      code: 'LLMGW_RANK_FENCE_FAILED',
      message: expect.stringMatching(/does not read back as installed/),
    });
    expect(nft.scripts).toHaveLength(1);
  });

  test('an install that reads back as written passes; removing an absent fence runs no script', async () => {
    const nft = fakeNft(() => captured);
    const fence = new RankFence(nft.run);
    await fence.install({ key: 'tiny-1.g2.r0', ports: [7105], peers: ['10.1.0.4', '10.1.0.4'] });
    await fence.remove('never-0.g0.r1');
    expect(nft.scripts).toHaveLength(1);
  });

  test('sweep removes the fences `keep` refuses, and only those', async () => {
    const nft = fakeNft(() => captured);
    // The stand-in never forgets, so the removal's read-back fails: the scripts are what counts here.
    await expect(new RankFence(nft.run).sweep((k) => k === 'qwen-0.g0.r1')).rejects.toMatchObject({
      code: 'LLMGW_RANK_FENCE_FAILED',
    });
    expect(nft.scripts).toEqual([
      'delete element inet llmgw rank_ports { 7105 }\ndelete chain inet llmgw rank-tiny-1.g2.r0\n',
    ]);
  });
});

describe('fenceAvailable', () => {
  test('off, with the reason, for a non-root agent, a missing nft, and an nft that may not read the ruleset', async () => {
    const ok: NftRunner = async () => '';
    expect(await fenceAvailable(ok, 1000)).toEqual({
      ok: false,
      reason: expect.stringMatching(/not root \(uid 1000\)/),
    });
    const missing: NftRunner = async () => {
      throw Object.assign(new Error('spawn nft ENOENT'), { code: 'ENOENT' });
    };
    expect(await fenceAvailable(missing, 0)).toEqual({
      ok: false,
      reason: expect.stringMatching(/apt-get install nftables/),
    });
    const denied: NftRunner = async () => {
      throw new Error('nft list tables: Operation not permitted');
    };
    expect(await fenceAvailable(denied, 0)).toEqual({ ok: false, reason: expect.stringMatching(/CAP_NET_ADMIN/) });
    expect(await fenceAvailable(ok, 0)).toEqual({ ok: true });
  });
});

test('peerAddresses keeps IP literals and resolves names', async () => {
  expect(await peerAddresses(['10.0.0.1', '10.0.0.1', 'localhost'])).toEqual(
    expect.arrayContaining(['10.0.0.1', '127.0.0.1']),
  );
});

describe('each engine names its rank ports', () => {
  const launch = (rank: number, world: number): ShardLaunch => ({
    model: 'm',
    source: '/w',
    profile: { name: 'p', engine: 'sim', gpusPerNode: 1, nodes: world, args: [] } as unknown as ShardLaunch['profile'],
    rank,
    world,
    host: '10.0.0.2',
    port: 7001,
    distHost: '10.0.0.1',
    distPort: 7002,
  });
  test.each([
    ['llamacpp', [[], [7001], [7001]]],
    ['vllm', [[7002], [], []]],
    ['sglang', [[7002], [], []]],
    ['sim', [[7002], [], []]],
  ] as const)('%s: ranks 0, 1, 2 of three; none single-node', (engine, byRank) => {
    const spec = ENGINE_SPECS[engine];
    expect([0, 1, 2].map((r) => spec.rankPorts(launch(r, 3)))).toEqual(byRank);
    expect(spec.rankPorts(launch(0, 1))).toEqual([]);
  });
});
