/**
 * Which GPU indices of a node a shard gets: pure, used by placement. With the node's topology matrix the closest
 * set of free GPUs wins (its weakest link first, then all its links), else the lowest free indices.
 */
import { linkScore } from './hardware/gpu-topology';
import type { GpuTopology, NodeInventory } from './types';

/** Exhaustive search stops being cheap past this many candidate sets (C(16,8) is 12,870). */
const MAX_SETS = 20_000;

/** The GPU indices of `inventory` not in `held`, ascending. */
export function freeIndices(inventory: Pick<NodeInventory, 'gpus'>, held: readonly number[]): number[] {
  const taken = new Set(held);
  return inventory.gpus
    .map((g) => g.index)
    .filter((i) => !taken.has(i))
    .sort((a, b) => a - b);
}

/** How many of `inventory`'s GPUs are not in `held`: freeIndices' length without building the list (placement counts every node). */
export function freeCount(inventory: Pick<NodeInventory, 'gpus'>, held: readonly number[]): number {
  if (held.length === 0) return inventory.gpus.length;
  let free = 0;
  for (const g of inventory.gpus) if (!held.includes(g.index)) free++;
  return free;
}

function combinations(n: number, k: number): number {
  let c = 1;
  for (let i = 1; i <= k; i++) c = (c * (n - k + i)) / i;
  return c;
}

/** Score of a set: its weakest link and the sum of its links (compared in that order). Row r is GPU<r>. */
function score(set: number[], t: GpuTopology): [number, number] {
  let min = Infinity;
  let sum = 0;
  for (const [n, a] of set.entries()) {
    for (const b of set.slice(n + 1)) {
      const s = linkScore(t.links[a]?.[b] ?? '');
      min = Math.min(min, s);
      sum += s;
    }
  }
  return [min, sum];
}

/**
 * `count` indices out of `free` (ascending), or null when there are too few. Without a topology, or for one GPU,
 * the lowest ones; with one, the best-connected set, ties going to the lowest indices.
 */
export function pickGpus(free: readonly number[], count: number, topology?: GpuTopology | null): number[] | null {
  if (count <= 0) return [];
  if (free.length < count) return null;
  const lowest = free.slice(0, count);
  if (!topology || count === 1 || combinations(free.length, count) > MAX_SETS) return lowest;
  let best = lowest;
  let bestScore = score(lowest, topology);
  const set: number[] = [];
  const walk = (from: number): void => {
    if (set.length === count) {
      const s = score(set, topology);
      if (s[0] > bestScore[0] || (s[0] === bestScore[0] && s[1] > bestScore[1])) [best, bestScore] = [[...set], s];
      return;
    }
    for (let i = from; i <= free.length - (count - set.length); i++) {
      set.push(free[i] as number);
      walk(i + 1);
      set.pop();
    }
  };
  walk(0);
  return best;
}
