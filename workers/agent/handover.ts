/**
 * How the last agent on this node ended, as the next one finds it: an agent that stops cleanly hands its shards
 * back (they fail with LLMGW_AGENT_STOPPED and their replicas run them again here), and leaves a marker saying so.
 * No marker at start: the last agent crashed (or there was none), its shards' activities are orphaned, and the
 * registration says so, so their replicas run them again for this agent to adopt now — not when Temporal would
 * time the orphans out.
 */
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const MARKER = 'agent-stopped';

/** True when the previous agent on this state dir did not stop cleanly; consumes its marker. */
export function previousAgentCrashed(stateDir: string): boolean {
  const marker = join(stateDir, MARKER);
  if (!existsSync(marker)) return true;
  rmSync(marker, { force: true });
  return false;
}

/** Leaves the marker of a clean stop, once this agent's shards were handed back. */
export function markCleanStop(stateDir: string): void {
  writeFileSync(join(stateDir, MARKER), `${new Date().toISOString()}\n`);
}
