/** Passive ejection: replicas that failed to connect are skipped by new requests for a while, then tried again. */
import type { GatewayLog } from './log';

/** Options of the ejection list. */
export interface EjectionOptions {
  log: GatewayLog;
  /** How long a replica is skipped after its first failure, ms (default 1 s); doubles while it keeps failing */
  ejectMs?: number;
  /** The longest it is skipped, ms (default 30 s) */
  ejectMaxMs?: number;
  /** Milliseconds now; tests pass their own clock */
  now: () => number;
  /** Told of each ejection (metrics) */
  onEject?: (id: string) => void;
}

/** A replica the ejection list judges: its id and the endpoint it failed at. */
export interface Ejectable {
  id: string;
  endpoint: string;
}

interface Ejection {
  /** the endpoint that failed: the same replica rebuilt at another endpoint starts afresh */
  endpoint: string;
  since: number;
  until: number;
  forMs: number;
  /** one request was let through after `until` to see whether the replica connects again */
  trial: boolean;
}

/** The replicas skipped for new requests because they failed to connect, each until its time is up. */
export class Ejections {
  private readonly ejected = new Map<string, Ejection>();

  constructor(private readonly opts: EjectionOptions) {}

  /** True when no replica is ejected: the per-request paths skip all work then. */
  get empty(): boolean {
    return this.ejected.size === 0;
  }

  /** `candidates` without the ejected ones, or all of them when every one is ejected (a 503 with no attempt helps no one). */
  filter<T extends Ejectable>(candidates: T[], now: number): T[] {
    const live = candidates.filter((r) => !((this.ejected.get(r.id)?.until ?? 0) > now));
    return live.length > 0 ? live : candidates;
  }

  /** Called with the replica a request goes to: an ejected one whose time is up gets this request as its trial. */
  chosen(id: string, now: number): void {
    const e = this.ejected.get(id);
    // The other requests keep skipping it until the trial answers (taken back) or fails (ejected for longer).
    if (e && e.until <= now) {
      e.until = now + e.forMs;
      e.trial = true;
    }
  }

  /** Ejects `replica` after a failed connect; the other requests of one burst of failures count once. */
  eject(replica: Ejectable, error: string): void {
    const now = this.opts.now();
    const prev = this.ejected.get(replica.id);
    const again = prev !== undefined && prev.endpoint === replica.endpoint;
    if (again && !prev.trial && prev.until > now) return;
    const forMs = again ? Math.min(prev.forMs * 2, this.opts.ejectMaxMs ?? 30_000) : (this.opts.ejectMs ?? 1000);
    this.ejected.set(replica.id, {
      endpoint: replica.endpoint,
      since: again ? prev.since : now,
      until: now + forMs,
      forMs,
      trial: false,
    });
    this.opts.onEject?.(replica.id);
    this.opts.log('replica ejected: it failed to connect; new requests skip it for a while', {
      level: 'warn',
      replica: replica.id,
      endpoint: replica.endpoint,
      forMs,
      error,
    });
  }

  /** Takes `id` back: it answered (any HTTP status: it connects again). */
  healthy(id: string): void {
    const e = this.ejected.get(id);
    if (!e) return;
    this.ejected.delete(id);
    this.opts.log('replica taken back: it answered again', {
      level: 'info',
      replica: id,
      endpoint: e.endpoint,
      ejectedForMs: this.opts.now() - e.since,
    });
  }

  /** True while `id` is skipped. */
  has(id: string): boolean {
    return (this.ejected.get(id)?.until ?? 0) > this.opts.now();
  }

  /** Forgets replicas no longer routable at the endpoint they failed at (left the table, or rebuilt elsewhere). */
  keepOnly(endpoints: Map<string, string>): void {
    for (const [id, e] of this.ejected) if (endpoints.get(id) !== e.endpoint) this.ejected.delete(id);
  }
}
