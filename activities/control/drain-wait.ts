/** A stopping replica's wait for the requests the gateways still have in flight on it, bounded by the drain grace. */
import { heartbeat, sleep } from '@temporalio/activity';
import { DrainStore, holdersOf } from '../../lib/store/drain';
import type { Store } from '../../lib/store/store';
import type { ReplicaId } from '../../lib/types';

/** What the wait needs: the store, server.yaml's drain.graceS and gateway.refreshMs. */
export interface DrainWaitDeps {
  store: Store;
  /** drain.graceS (a catalog model's drainGraceS overrides it); default 600 */
  drainGraceS?: number;
  /** gateway.refreshMs; default 500 */
  gatewayRefreshMs?: number;
}

/** A stopping replica's drain as it stands: requests in flight on it, the live gateways still holding it, the grace left. */
export interface InflightView {
  inFlight: number;
  gateways: string[];
  /** since it left routing (recorded `stopping`), by MySQL's clock */
  stoppingForMs: number;
  graceLeftMs: number;
}

/** How a stopping replica's wait ended. */
export interface InflightWaitResult {
  waitedMs: number;
  /** requests still in flight when it ended (> 0 only when the grace ran out) */
  inFlight: number;
  graceExpired: boolean;
}

/** The drain of `replicaId` as it stands, or null when it is not stopping. */
export async function inflightView(
  deps: DrainWaitDeps,
  replicaId: string,
  model: string,
): Promise<InflightView | null> {
  const drains = new DrainStore(deps.store.pool);
  const since = await drains.stoppingForMs(replicaId);
  if (since === null) return null;
  const held = holdersOf(await drains.liveReports(), replicaId);
  const graceS = (await deps.store.getModel(model))?.drainGraceS ?? deps.drainGraceS ?? 600;
  return { ...held, stoppingForMs: since, graceLeftMs: Math.max(0, graceS * 1000 - since) };
}

/** Builds the wait activity over the store. */
export function createDrainWaitActivities(deps: DrainWaitDeps) {
  // Two routing refreshes: by then every gateway, reporting or not (an older release), has dropped the replica.
  const floorMs = 2 * (deps.gatewayRefreshMs ?? 500);
  return {
    /**
     * Waits until no live gateway routes the stopping replica or has a request in flight on it (and at least two
     * routing refreshes), or until its drain grace is over. The clock is the replica's `stopping` row in MySQL, so
     * a retry after a lost worker resumes the same deadline. Heartbeats what it waits for.
     */
    async waitInflight(input: { replicaId: ReplicaId; model: string }): Promise<InflightWaitResult> {
      let most = 0;
      for (;;) {
        const v = await inflightView(deps, input.replicaId, input.model);
        if (!v) return { waitedMs: 0, inFlight: 0, graceExpired: false };
        most = Math.max(most, v.inFlight);
        const done = v.stoppingForMs >= floorMs && v.gateways.length === 0;
        if (done || v.graceLeftMs <= 0) {
          const secs = (v.stoppingForMs / 1000).toFixed(1);
          if (!done) {
            await deps.store.event({
              kind: 'replica.grace-over',
              model: input.model,
              replicaId: input.replicaId,
              message: `drain grace over after ${secs}s with ${v.inFlight} request(s) in flight (gateways ${v.gateways.join(', ')}): stopping the engine anyway`,
            });
          } else if (most > 0) {
            await deps.store.event({
              kind: 'replica.drained',
              model: input.model,
              replicaId: input.replicaId,
              message: `its requests in flight finished ${secs}s after it left routing`,
            });
          }
          return { waitedMs: v.stoppingForMs, inFlight: done ? 0 : v.inFlight, graceExpired: !done };
        }
        heartbeat({ inFlight: v.inFlight, gateways: v.gateways, graceLeftS: Math.round(v.graceLeftMs / 1000) });
        await sleep(500);
      }
    },
  };
}
