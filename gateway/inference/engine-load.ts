/**
 * What the engines say of their own load (their queue and KV-cache use, gathered by each node's agent and polled
 * from its door: engine-signals.ts), kept beside the routing table. The pick reads it with one Map lookup; a
 * signal older than its stale bound is dropped by the poller's timer, never judged on the request path, so a
 * missing or stale signal leaves the choice to the gateway's own in-flight counts.
 */

/** One replica's signal as the table uses it. */
interface Load {
  waiting: number;
  kvUsage: number;
  /** When the engine was read (ms, the gateway's clock, less the age the door reported) */
  at: number;
}

/** Replica id → its engine's last signal. */
export class EngineLoad {
  private readonly byId = new Map<string, Load>();

  /** The requests waiting in the replica's engine (0 when it has no fresh signal). */
  waiting(id: string): number {
    return this.byId.get(id)?.waiting ?? 0;
  }

  /** Its KV-cache use, 0..1 (0 when it has no fresh signal). */
  kvUsage(id: string): number {
    return this.byId.get(id)?.kvUsage ?? 0;
  }

  /** Records a replica's signal read at `at`. */
  set(id: string, s: { waiting: number; kvUsage: number | null }, at: number): void {
    this.byId.set(id, { waiting: s.waiting, kvUsage: s.kvUsage ?? 0, at });
  }

  /** Drops every signal read before `cutoff`; returns how many. */
  dropOlderThan(cutoff: number): number {
    let n = 0;
    for (const [id, l] of this.byId)
      if (l.at < cutoff) {
        this.byId.delete(id);
        n++;
      }
    return n;
  }

  /** Every replica with a signal now, with its values (metrics, tests). */
  entries(): [string, { waiting: number; kvUsage: number }][] {
    return [...this.byId].map(([id, l]) => [id, { waiting: l.waiting, kvUsage: l.kvUsage }]);
  }
}
