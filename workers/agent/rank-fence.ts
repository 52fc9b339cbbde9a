/**
 * The agent's rank fence (lib/rank-fence.ts): on where it can be, one `RANK FENCE OFF: <reason>` line where it
 * cannot, and at start the fences of engines no longer running swept away (those still running are kept for the
 * runShard that adopts them, which installs them again).
 */
import { findEngine } from '../../activities/node/engines';
import { fenceAvailable, nftProcess, RankFence } from '../../lib/rank-fence';

type Log = (msg: string, fields?: Record<string, unknown>) => void;

/** Removes the fences of shards whose engine is neither supervised nor recorded live in the state dir. */
export async function sweepFences(
  fence: RankFence,
  stateDir: string,
  supervised: Set<string>,
  log: Log,
): Promise<void> {
  try {
    const removed = await fence.sweep((key) => supervised.has(key) || findEngine(stateDir, key).kind === 'live');
    if (removed.length) log('stale rank fences removed', { keys: removed });
  } catch (err) {
    log('RANK FENCE SWEEP FAILED: fences of stopped engines may remain', {
      level: 'error',
      error: (err as Error).message,
    });
  }
}

/** The node's fence, or null (off: not asked for, or not possible here, said once). */
export async function startRankFence(o: {
  enabled: boolean;
  nftArgv?: string[];
  stateDir: string;
  supervised: Set<string>;
  log: Log;
}): Promise<RankFence | null> {
  if (!o.enabled) {
    o.log('RANK FENCE OFF: not asked for (llmgw agent --no-rank-fence)', { level: 'warn' });
    return null;
  }
  const nft = nftProcess(o.nftArgv);
  const can = await fenceAvailable(nft);
  if (!can.ok) {
    o.log(`RANK FENCE OFF: ${can.reason}`, { level: 'warn' });
    return null;
  }
  const fence = new RankFence(nft);
  await sweepFences(fence, o.stateDir, o.supervised, o.log);
  o.log("rank fence on: multi-node ranks accept only their replicas' nodes (nftables table inet llmgw)");
  return fence;
}
