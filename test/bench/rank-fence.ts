/**
 * `npm run bench:rank-fence`: how long the agent's rank fence takes to install and to remove one shard's fence
 * (RankFence.install / remove: read the table, one `nft -f -` transaction, read it back), alone and beside 8 held
 * shards, median and p90 of `--rounds` each. Runs itself inside a network namespace of its own (made and removed
 * here), so the machine's own ruleset is never touched; nft is run as the agent runs it, with no wrapper. Needs root.
 *
 *   npm run bench:rank-fence [-- --rounds 40]
 */
import '../helpers/bench-help'; // --help: the comment above
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { quantile } from '../../lib/bench/stats';
import { nftProcess, RankFence, type ShardFence } from '../../lib/rank-fence';

const INSIDE = 'LLMGW_RANK_FENCE_BENCH_NS';

const shard = (i: number): ShardFence => ({
  key: `bench-${i}.g0.r1`,
  ports: [20_000 + i],
  peers: ['10.9.0.1', '10.9.0.2', '10.9.0.3', '10.9.0.4'],
});

async function time(f: () => Promise<void>): Promise<number> {
  const t = process.hrtime.bigint();
  await f();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

async function rounds(fence: RankFence, n: number): Promise<{ install: number[]; remove: number[] }> {
  const install: number[] = [];
  const remove: number[] = [];
  const f = shard(99);
  for (let i = 0; i < n; i++) {
    install.push(await time(() => fence.install(f)));
    remove.push(await time(() => fence.remove(f.key)));
  }
  return { install, remove };
}

const fmt = (xs: number[]): string =>
  `median ${quantile(xs, 0.5).toFixed(1)} ms, p90 ${quantile(xs, 0.9).toFixed(1)} ms`;

async function inside(n: number): Promise<void> {
  const fence = new RankFence(nftProcess());
  // Warm-up: the first install makes the table, the map and the input chain.
  await rounds(fence, 3);
  const alone = await rounds(fence, n);
  for (let i = 0; i < 8; i++) await fence.install(shard(i));
  const beside = await rounds(fence, n);
  const held = (await fence.read()).chains.size;
  for (let i = 0; i < 8; i++) await fence.remove(shard(i).key);
  console.log(`rank fence, ${n} rounds each (nft ${spawnSync('nft', ['--version']).stdout.toString().trim()}):`);
  console.log(`  alone:                 install ${fmt(alone.install)}; remove ${fmt(alone.remove)}`);
  console.log(`  beside ${held} held shards: install ${fmt(beside.install)}; remove ${fmt(beside.remove)}`);
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { rounds: { type: 'string', default: '40' } } });
  const n = Number(values.rounds);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--rounds ${values.rounds}: give a whole number, e.g. 40`);
  if (process.env[INSIDE]) return inside(n);
  if (process.getuid?.() !== 0) throw new Error('bench:rank-fence needs root (a network namespace, nftables)');
  const ns = `llmgw-fence-bench-${process.pid}`;
  const ip = (...args: string[]): void => {
    const r = spawnSync('ip', args, { stdio: 'inherit' });
    if (r.status !== 0) throw new Error(`ip ${args.join(' ')} failed`);
  };
  ip('netns', 'add', ns);
  try {
    const r = spawnSync(
      'ip',
      ['netns', 'exec', ns, process.execPath, ...process.execArgv, __filename, ...process.argv.slice(2)],
      {
        stdio: 'inherit',
        env: { ...process.env, [INSIDE]: '1' },
      },
    );
    if (r.status !== 0) process.exitCode = r.status ?? 1;
  } finally {
    ip('netns', 'del', ns);
  }
}

main().catch((err: Error) => {
  console.error(err.message);
  process.exit(1);
});
