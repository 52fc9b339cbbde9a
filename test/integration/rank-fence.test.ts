/**
 * The rank fence on real nftables, in network namespaces of the test's own (test hosts: one bridge, one address
 * each): a fenced port answers the shard's peers and resets everyone else; the rules are idempotent, survive a new
 * agent (adopted, stale ones swept) and are gone once the shard stops. Then the whole path: runShard fencing a
 * two-rank sim replica's dist-init port on its node while the engine runs, the peer rank joining through it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createNodeActivities, type RunShardInput, type ShardHeartbeat } from '../../activities/node';
import { nftProcess, RankFence } from '../../lib/rank-fence';
import { simEngineArgv } from '../../lib/sim/argv';
import { freePort } from '../helpers/ports';
import { startTestNetwork, type RoleHost, type TestNetwork } from '../helpers/test-host';
import { waitFor } from '../helpers/wait';

const nftIn = (h: RoleHost): ReturnType<typeof nftProcess> => nftProcess(['ip', 'netns', 'exec', h.ns, 'nft']);

/** Opens a TCP connection from inside `from` to `to:port`: open, refused (a reset), or what else happened. */
async function dial(from: RoleHost, to: string, port: number): Promise<string> {
  const r = await from.exec(`timeout 3 bash -c 'exec 3<>/dev/tcp/${to}/${port}' 2>&1`);
  if (r.code === 0) return 'open';
  return /Connection refused/.test(r.stdout + r.stderr) ? 'refused' : `failed (${r.code}): ${r.stdout}${r.stderr}`;
}

let lan: TestNetwork;
let node: RoleHost;
let peer: RoleHost;
let stranger: RoleHost;

beforeAll(async () => {
  lan = await startTestNetwork();
  node = await lan.startRoleHost('node-a');
  peer = await lan.startRoleHost('node-b');
  stranger = await lan.startRoleHost('other');
});
afterAll(async () => {
  await lan?.close();
});

describe('RankFence on nftables', () => {
  test('a fenced port answers its peers and refuses the rest; install is idempotent and a new agent adopts it; removal reopens it', async () => {
    const port = await freePort();
    const listener = node.spawn(process.execPath, [
      '-e',
      `require('node:net').createServer((s) => s.end()).listen(${port}, '${node.address}')`,
    ]);
    try {
      await waitFor(async () => (await dial(stranger, node.address, port)) === 'open', {
        timeoutMs: 10_000,
        what: 'the listener, unfenced, to answer the stranger',
      });
      const fence = new RankFence(nftIn(node));
      const shard = { key: 'm-0.g0.r1', ports: [port], peers: [peer.address] };
      await fence.install(shard);
      expect(await dial(peer, node.address, port)).toBe('open');
      expect(await dial(stranger, node.address, port)).toBe('refused');
      // The node itself (its agent's waitListening) reaches it over lo.
      expect(await dial(node, node.address, port)).toBe('open');

      const listed = (): Promise<string> => nftIn(node)(['list', 'table', 'inet', 'llmgw']);
      const before = await listed();
      await fence.install(shard);
      // The next agent: a RankFence of its own installs the adopted shard again, and sweeps what no engine wants.
      const next = new RankFence(nftIn(node));
      await next.install(shard);
      expect(await listed()).toBe(before);
      await next.install({ key: 'gone-0.g0.r1', ports: [port + 1], peers: [peer.address] });
      expect(await next.sweep((k) => k === shard.key)).toEqual(['gone-0.g0.r1']);
      expect(await listed()).toBe(before);
      expect(await dial(stranger, node.address, port)).toBe('refused');

      await next.remove(shard.key);
      expect(await dial(stranger, node.address, port)).toBe('open');
      const t = await next.read();
      expect({ chains: [...t.chains.keys()], ports: [...t.ports.keys()] }).toEqual({ chains: [], ports: [] });
      await next.remove(shard.key); // idempotent
    } finally {
      listener.kill('SIGKILL');
    }
  });
});

describe('runShard with the fence', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-rank-fence-'));
  afterAll(() => rmSync(stateDir, { recursive: true, force: true }));
  const RUN_ID = '00000000-0000-0000-0000-0000000000f1';

  const run = (acts: ReturnType<typeof createNodeActivities>, input: RunShardInput) => {
    const env = new MockActivityEnvironment(
      { heartbeatTimeoutMs: 10_000, workflowExecution: { workflowId: 'fence', runId: RUN_ID } },
      { logger: new DefaultLogger('ERROR') },
    );
    const beats: ShardHeartbeat[] = [];
    env.on('heartbeat', (d: ShardHeartbeat) => beats.push({ ...d }));
    const outcome = env.run(acts.runShard, input).then(
      () => null,
      (err: unknown) => err as Error & Partial<ApplicationFailure>,
    );
    const running = (): Promise<ShardHeartbeat> =>
      waitFor(() => beats.find((b) => b.state === 'running'), {
        timeoutMs: 20_000,
        what: `rank ${input.rank} to report its engine running`,
      });
    return { outcome, running };
  };
  const stop = (acts: ReturnType<typeof createNodeActivities>, rank: number) =>
    new MockActivityEnvironment(
      { workflowExecution: { workflowId: 'fence', runId: RUN_ID } },
      { logger: new DefaultLogger('ERROR') },
    ).run(acts.stopShard, { replicaId: 'fenced-0', generation: 0, rank });

  test("a multi-node rank 0's dist-init port is fenced to its replica's nodes while it runs, and unfenced once it stops", async () => {
    const [p0, p1, dist] = [await freePort(), await freePort(), await freePort()];
    const acts = (h: RoleHost, fence?: RankFence) =>
      createNodeActivities({
        nodeId: h.name,
        // The engine in the node's namespace: `ip netns exec` execs, so the shim records the engine's own pid.
        engineArgv: () => ['ip', 'netns', 'exec', h.ns, ...simEngineArgv()],
        stateDir: join(stateDir, h.name),
        stopGraceMs: 3000,
        ...(fence ? { fence } : {}),
      });
    const fence = new RankFence(nftIn(node));
    const onNode = acts(node, fence);
    const onPeer = acts(peer, new RankFence(nftIn(peer)));
    const shard = (rank: number): RunShardInput => ({
      replicaId: 'fenced-0',
      model: 'fenced',
      source: 'sim://fenced',
      profile: { name: 'two', engine: 'sim', nodes: 2, gpusPerNode: 1, args: ['--tokens-per-second', '0'] },
      rank,
      world: 2,
      host: rank === 0 ? node.address : peer.address,
      port: rank === 0 ? p0 : p1,
      distHost: node.address,
      distPort: dist,
      peers: [
        { host: node.address, port: p0 },
        { host: peer.address, port: p1 },
      ],
    });
    const head = run(onNode, shard(0));
    await head.running();
    await waitFor(async () => (await dial(peer, node.address, dist)) === 'open', {
      timeoutMs: 10_000,
      what: "rank 0's dist-init port to answer the peer",
    });
    expect(await dial(stranger, node.address, dist)).toBe('refused');
    expect([...(await fence.read()).ports]).toEqual([[dist, 'fenced-0.g0.r0']]);
    // The sim's rank 1 has no rank port: its node's table stays empty.
    const worker = run(onPeer, shard(1));
    await worker.running();
    expect((await new RankFence(nftIn(peer)).read()).chains.size).toBe(0);
    // Rank 0 serves only once rank 1 joined it, through the fence.
    await waitFor(
      async () =>
        (await fetch(`http://${node.address}:${p0}/health`, { signal: AbortSignal.timeout(1000) })).status === 200,
      { timeoutMs: 20_000, what: 'rank 0 to serve with rank 1 joined' },
    );

    expect(await stop(onNode, 0)).toEqual({ engine: 'stopped' });
    expect(await head.outcome).toBeNull();
    const t = await fence.read();
    expect({ chains: [...t.chains.keys()], ports: [...t.ports.keys()] }).toEqual({ chains: [], ports: [] });
    await stop(onPeer, 1);
    await worker.outcome;
  });

  test('a rank whose engine fails to start leaves no fence behind', async () => {
    const fence = new RankFence(nftIn(node));
    const logged: string[] = [];
    const onNode = createNodeActivities({
      nodeId: node.name,
      engineArgv: () => ['/nonexistent/engine'],
      stateDir: join(stateDir, 'failing'),
      fence,
      log: (msg) => void logged.push(msg),
    });
    const dist = await freePort();
    const r = run(onNode, {
      replicaId: 'fenced-1',
      model: 'fenced',
      source: 'sim://fenced',
      profile: { name: 'two', engine: 'sim', nodes: 2, gpusPerNode: 1, args: [] },
      rank: 0,
      world: 2,
      host: node.address,
      port: await freePort(),
      distHost: node.address,
      distPort: dist,
      peers: [
        { host: node.address, port: 1 },
        { host: peer.address, port: 2 },
      ],
    });
    expect((await r.outcome)?.type).toBe('LLMGW_ENGINE_EXITED');
    // Fenced before the launch (as every rank is, before its engine listens), unfenced after it failed.
    expect(logged).toContain('rank fence installed');
    expect((await fence.read()).chains.size).toBe(0);
  });
});
