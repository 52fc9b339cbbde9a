/**
 * Orphan collection when an agent starts: engines a previous agent left running that no shard wants any more
 * are stopped; wanted ones get a while for their runShard to come back and adopt them; old records are removed.
 */
import {
  listEngineKeys,
  newestFileMs,
  readEngineState,
  removeEngineFiles,
  type EngineState,
} from '../../lib/engine-state';
import { findEngine, stopEngine } from './engines';

/** A shard the control plane has placed on this node. */
export interface AssignedShard {
  replicaId: string;
  rank: number;
  port: number;
}

/** True when the control plane still places the shard this engine runs for on this node. */
export function isAssigned(assigned: AssignedShard[], st: Pick<EngineState, 'replicaId' | 'rank' | 'port'>): boolean {
  return assigned.some((a) => a.replicaId === st.replicaId && a.rank === st.rank && a.port === st.port);
}

export interface CollectOptions {
  stateDir: string;
  /** The shards placed on this node; a rejection means "unknown": nothing is stopped as unwanted. */
  assigned: () => Promise<AssignedShard[]>;
  /** Keys a runShard supervises right now (never touched). */
  supervised: Set<string>;
  /** How long a wanted engine may wait for its runShard before it counts as abandoned. */
  adoptWithinMs?: number;
  /** Records of finished engines older than this are removed. */
  keepFinishedMs?: number;
  stopGraceMs?: number;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface Collection {
  /** Keys stopped at once, as no shard wants them. */
  stopped: string[];
  /** Keys left for adoption (stopped at the deadline unless adopted). */
  pending: string[];
  /** Keys whose files were removed. */
  removed: string[];
  /** Resolves when every pending engine was adopted or stopped. */
  settled: Promise<void>;
  /** Cancels the pending deadlines (the agent is stopping). */
  cancel(): void;
}

const DAY_MS = 24 * 3600_000;

/** Runs one collection over the state dir. */
export async function collectOrphans(o: CollectOptions): Promise<Collection> {
  const adoptWithinMs = o.adoptWithinMs ?? 120_000;
  const keepMs = o.keepFinishedMs ?? DAY_MS;
  const grace = o.stopGraceMs ?? 15_000;
  let assigned: AssignedShard[] | null;
  try {
    assigned = await o.assigned();
  } catch (err) {
    o.log('could not ask the control plane which shards this node holds; leaving every engine for adoption', {
      error: (err as Error).message,
    });
    assigned = null;
  }
  const wanted = (st: EngineState): boolean | null => (assigned === null ? null : isAssigned(assigned, st));

  const out: Collection = {
    stopped: [],
    pending: [],
    removed: [],
    settled: Promise.resolve(),
    cancel: () => undefined,
  };
  const waits: Promise<void>[] = [];
  const timers: { t: NodeJS.Timeout; resolve: () => void }[] = [];
  for (const key of listEngineKeys(o.stateDir)) {
    if (o.supervised.has(key)) continue;
    const found = findEngine(o.stateDir, key);
    if (found.kind !== 'live') {
      if (Date.now() - newestFileMs(o.stateDir, key) > keepMs) {
        removeEngineFiles(o.stateDir, key);
        out.removed.push(key);
      }
      continue;
    }
    const st = found.state;
    const want = wanted(st);
    if (want === false) {
      o.log('stopping an engine no shard wants', {
        key,
        pid: st.enginePid,
        why: `no shard ${st.replicaId} rank ${st.rank} on port ${st.port} is placed on this node`,
      });
      await stopEngine(st, grace);
      removeEngineFiles(o.stateDir, key, { keepLog: true });
      out.stopped.push(key);
      continue;
    }
    out.pending.push(key);
    o.log('engine left for adoption', {
      key,
      pid: st.enginePid,
      withinMs: adoptWithinMs,
      assigned: want === null ? 'unknown' : true,
    });
    waits.push(
      new Promise<void>((resolve) => {
        timers.push({
          resolve,
          t: setTimeout(() => {
            // Adopted meanwhile (or adopted, and already finished with): the runShard owns it.
            const now = readEngineState(o.stateDir, key);
            if (
              o.supervised.has(key) ||
              !now ||
              now.enginePid !== st.enginePid ||
              findEngine(o.stateDir, key).kind !== 'live'
            )
              return resolve();
            o.log('stopping an engine no runShard adopted', {
              key,
              pid: st.enginePid,
              why: `not adopted within ${adoptWithinMs / 1000}s of the agent's start`,
            });
            void stopEngine(st, grace)
              .then(() => removeEngineFiles(o.stateDir, key, { keepLog: true }))
              .finally(resolve);
          }, adoptWithinMs),
        });
      }),
    );
  }
  out.settled = Promise.all(waits).then(() => undefined);
  out.cancel = (): void =>
    timers.forEach(({ t, resolve }) => {
      clearTimeout(t);
      resolve();
    });
  return out;
}
