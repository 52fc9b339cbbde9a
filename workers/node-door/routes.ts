/**
 * The door's routes, read from the agent's engine records (its `--state-dir`, lib/engine-state.ts): every rank 0
 * engine whose shim or engine still runs and that has no exit record is served at its loopback port. Read every
 * `periodMs` and on any change in the directory, so the door needs no word from the agent, and serves on while the
 * agent restarts.
 */
import { watch, type FSWatcher } from 'node:fs';
import { listEngineKeys, readEngineExit, readEngineState, sameProcess } from '../../lib/engine-state';

/** Replica id -> the loopback port of its rank 0 engine on this node. */
export function readRoutes(stateDir: string): Map<string, number> {
  const best = new Map<string, { port: number; generation: number }>();
  for (const key of listEngineKeys(stateDir)) {
    const st = readEngineState(stateDir, key);
    if (!st || st.rank !== 0 || readEngineExit(stateDir, key)) continue;
    if (!sameProcess(st.enginePid, st.engineStartTime) && !sameProcess(st.shimPid, st.shimStartTime)) continue;
    const had = best.get(st.replicaId);
    if (!had || st.generation > had.generation) best.set(st.replicaId, { port: st.port, generation: st.generation });
  }
  return new Map([...best].map(([id, r]) => [id, r.port]));
}

/** The routes, kept current. */
export class RouteWatch {
  private routes = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private watcher: FSWatcher | null = null;
  private soon: NodeJS.Timeout | null = null;

  constructor(
    private readonly stateDir: string,
    private readonly onChange: (routes: ReadonlyMap<string, number>, before: ReadonlyMap<string, number>) => void,
    private readonly periodMs = 500,
  ) {}

  start(): void {
    this.refresh();
    this.timer = setInterval(() => this.refresh(), this.periodMs);
    try {
      // A record written or removed is seen within milliseconds (the timer is what catches an engine that died).
      // Records only: an engine's log grows beside them with every line it writes.
      this.watcher = watch(this.stateDir, (_event, name) => {
        if (name !== null && !String(name).endsWith('.json')) return;
        if (!this.soon) this.soon = setTimeout(() => ((this.soon = null), this.refresh()), 20);
      });
      this.watcher.on('error', () => undefined);
    } catch {
      // No inotify here (or the directory is not there yet): the timer alone.
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    if (this.soon) clearTimeout(this.soon);
    this.watcher?.close();
    this.timer = this.soon = this.watcher = null;
  }

  port(replicaId: string): number | null {
    return this.routes.get(replicaId) ?? null;
  }

  replicas(): string[] {
    return [...this.routes.keys()];
  }

  refresh(): void {
    const next = readRoutes(this.stateDir);
    const same = next.size === this.routes.size && [...next].every(([id, p]) => this.routes.get(id) === p);
    if (same) return;
    const before = this.routes;
    this.routes = next;
    this.onChange(next, before);
  }
}
