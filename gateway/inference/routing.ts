/** The gateway's in-memory routing table: ready replicas per model, refreshed from the store, with in-flight counts. */
import type { GatewayReport } from '../../lib/store/drain';
import type { RouteRows } from '../../lib/store/store';

/** A replica the gateway can send a request to. */
export interface RoutableReplica {
  id: string;
  /** `http://host:port` */
  endpoint: string;
  /** Parsed from `endpoint` once per refresh, not per request. */
  host: string;
  port: number;
}

/** What `pick` decided. */
export type PickResult =
  | { kind: 'ok'; replica: RoutableReplica }
  | { kind: 'unknown-model' }
  | { kind: 'none-ready'; reason: string };

/** Options of a routing table. */
export interface RoutingOptions {
  refreshMs: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

interface ModelRoutes {
  ready: RoutableReplica[];
  /** Replicas that exist but cannot take requests, for the 503 message. */
  waiting: { id: string; state: string; reason: string | null }[];
  /** Round-robin cursor among equally loaded replicas. */
  next: number;
}

/** `http://host:port` → a routable replica, or null when the endpoint is not a plain http URL. */
function parseEndpoint(id: string, endpoint: string): RoutableReplica | null {
  try {
    const u = new URL(endpoint);
    if (u.protocol !== 'http:') return null;
    return { id, endpoint: u.origin, host: u.hostname.replace(/^\[|\]$/g, ''), port: Number(u.port || 80) };
  } catch {
    return null;
  }
}

/** Routes requests by model among ready replicas: least in-flight first, round-robin among ties. */
export class RoutingTable {
  private routes = new Map<string, ModelRoutes>();
  private inFlight = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private readonly log: NonNullable<RoutingOptions['log']>;

  constructor(private readonly load: () => Promise<RouteRows>, private readonly opts: RoutingOptions) {
    this.log = opts.log ?? ((): void => undefined);
  }

  /** Loads the table once (errors propagate), then refreshes it every `refreshMs` in the background. */
  async start(): Promise<void> {
    await this.refresh();
    this.stop();
    this.timer = setInterval(() => {
      this.refresh().catch((err: Error) => this.log('routing refresh failed; keeping the last table', { error: err.message }));
    }, this.opts.refreshMs);
    // The refresh timer alone must not keep the process alive.
    this.timer.unref();
  }

  /** Stops the background refresh. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Reloads the table now; on failure the previous table stays and the error propagates. */
  async refresh(): Promise<void> {
    const rows = await this.load();
    const next = new Map<string, ModelRoutes>();
    const entry = (model: string): ModelRoutes => {
      let r = next.get(model);
      if (!r) {
        // Keep the cursor so a refresh does not send every next request to the first replica.
        r = { ready: [], waiting: [], next: this.routes.get(model)?.next ?? 0 };
        next.set(model, r);
      }
      return r;
    };
    for (const m of rows.models) entry(m);
    for (const r of rows.replicas) {
      const target = r.state === 'ready' && r.endpoint ? parseEndpoint(r.id, r.endpoint) : null;
      if (target) entry(r.model).ready.push(target);
      else entry(r.model).waiting.push({ id: r.id, state: r.state, reason: r.reason ?? (r.state !== 'ready' ? null : r.endpoint ? `unusable endpoint ${r.endpoint}` : 'no endpoint yet') });
    }
    this.routes = next;
  }

  /** Routable (ready) replicas per model, as this table holds them now. */
  readyCounts(): Record<string, number> {
    return Object.fromEntries([...this.routes].map(([model, r]) => [model, r.ready.length]));
  }

  /** Model names the gateway knows, sorted. */
  models(): string[] {
    return [...this.routes.keys()].sort();
  }

  /** Chooses a replica of `model`, skipping the ids in `exclude` (replicas that already failed this request). */
  pick(model: string, exclude?: Set<string>): PickResult {
    const routes = this.routes.get(model);
    if (!routes) return { kind: 'unknown-model' };
    const candidates = exclude?.size ? routes.ready.filter((r) => !exclude.has(r.id)) : routes.ready;
    if (candidates.length === 0) return { kind: 'none-ready', reason: this.noneReadyReason(model, routes, exclude) };
    const n = candidates.length;
    const start = routes.next++ % n;
    let best = candidates[start];
    let bestLoad = this.inFlight.get(best.id) ?? 0;
    for (let i = 1; i < n && bestLoad > 0; i++) {
      const c = candidates[(start + i) % n];
      const load = this.inFlight.get(c.id) ?? 0;
      if (load < bestLoad) {
        best = c;
        bestLoad = load;
      }
    }
    return { kind: 'ok', replica: best };
  }

  /** Counts one more request in flight on replica `id`. */
  acquire(id: string): void {
    this.inFlight.set(id, (this.inFlight.get(id) ?? 0) + 1);
  }

  /** Counts one request on replica `id` as finished. */
  release(id: string): void {
    const n = (this.inFlight.get(id) ?? 0) - 1;
    if (n > 0) this.inFlight.set(id, n);
    else this.inFlight.delete(id);
  }

  /** The replicas this table routes and the requests in flight per replica: what the gateway reports for drains. */
  report(): GatewayReport {
    return { routed: [...this.routes.values()].flatMap((r) => r.ready.map((x) => x.id)).sort(), inflight: Object.fromEntries(this.inFlight) };
  }

  /** Requests in flight on replica `id` through this gateway. */
  inFlightOf(id: string): number {
    return this.inFlight.get(id) ?? 0;
  }

  private noneReadyReason(model: string, routes: ModelRoutes, exclude?: Set<string>): string {
    if (routes.ready.length > 0) {
      return `model ${model} has no ready replica left: ${[...(exclude ?? [])].join(', ')} failed for this request`;
    }
    if (routes.waiting.length === 0) return `model ${model} has no replicas`;
    const why = routes.waiting.map((w) => `${w.id}: ${w.state}${w.reason ? ` — ${w.reason}` : ''}`).join('; ');
    return `model ${model} has no ready replica (${why})`;
  }
}
