/** The gateway's in-memory routing table: ready replicas per model, refreshed from the store, with in-flight counts and ejections. */
import type { GatewayReport } from '../../lib/store/drain';
import type { ModelRouteFields, RouteChange } from '../../lib/store/route-changes';
import { parseDoorEndpoint } from '../../lib/node-door';
import type { RouteRows } from '../../lib/store/store';
import { byKey, HashRing, resolveRouting, type ResolvedRouting } from './affinity';
import { Ejections, type Ejectable } from './ejections';
import { EngineLoad } from './engine-load';
import { silentLog, type GatewayLog } from './log';

/** A replica the gateway can send a request to. */
export interface RoutableReplica {
  id: string;
  /** `http://host:port` */
  endpoint: string;
  /** Parsed from `endpoint` once per refresh, not per request. */
  host: string;
  port: number;
  /** The model it serves. */
  model: string;
  /** Behind a node's door (lib/node-door.ts): the node whose certificate must answer, and the path prefix */
  door?: { node: string; base: string };
  /** How many requests it takes at once before admission queues (admission.ts): catalog, engine slots or default. */
  limit: number;
}

/** What `pick` decided; `firstByteMs` is the model's own first-byte timeout when the catalog sets one. */
export type PickResult =
  | { kind: 'ok'; replica: RoutableReplica; firstByteMs?: number }
  | { kind: 'unknown-model' }
  | { kind: 'none-ready'; reason: string }
  /** Asked with `admit`: every candidate holds its limit of requests (admission queues the request). */
  | { kind: 'busy' };

const BUSY: PickResult = Object.freeze({ kind: 'busy' });

/** What admission hears from the table: a slot freed on a replica, a new table loaded. */
export interface RoutingListener {
  freed(replica: string): void;
  refreshed(): void;
}

/** Options of a routing table. */
export interface RoutingOptions {
  refreshMs: number;
  log?: GatewayLog;
  /** How long a replica that failed to connect is skipped at first, ms (default 1 s); doubles while it keeps failing */
  ejectMs?: number;
  /** The longest it is skipped, ms (default 30 s) */
  ejectMaxMs?: number;
  /** Milliseconds now (ejections, staleness); tests pass their own clock */
  clock?: () => number;
  /** A replica's limit when neither the catalog (maxConcurrent) nor its engine says one (default DEFAULT_MAX_CONCURRENT) */
  defaultLimit?: number;
  /** Asks a new replica's engine how many requests it serves at once (slots.ts); null: it does not say */
  probeSlots?: (replica: RoutableReplica) => Promise<number | null>;
}

/** A KV cache at least this full makes the least-outstanding pick look on for an equally loaded replica. */
const KV_FULL = 0.9;
/** Between equally loaded replicas, one whose KV cache is emptier by more than this is preferred. */
const KV_MARGIN = 0.1;

/** A replica's concurrency limit when neither the catalog nor the engine gives one. */
export const DEFAULT_MAX_CONCURRENT = 64;

interface ModelRoutes {
  ready: RoutableReplica[];
  /** Replicas that exist but cannot take requests, for the 503 message. */
  waiting: { id: string; state: string; reason: string | null }[];
  /** Round-robin cursor among equally loaded replicas. */
  next: number;
  firstByteMs?: number;
  /** Why no profile of the model serves /v1/embeddings, when none does */
  noEmbeddings?: string;
  /** How to choose among `ready` (the catalog's routing, defaults filled in) */
  routing: ResolvedRouting;
}

/** `http://host:port` or a node door's URL → a routable replica, or null when the endpoint is neither. */
function parseEndpoint(id: string, model: string, endpoint: string, limit: number): RoutableReplica | null {
  const door = endpoint.startsWith('https:') ? parseDoorEndpoint(endpoint) : null;
  if (door) return { id, endpoint, host: door.host, port: door.port, model, limit, door };
  try {
    const u = new URL(endpoint);
    if (u.protocol !== 'http:') return null;
    const host = u.hostname.replace(/^\[|\]$/g, '');
    return { id, endpoint: u.origin, host, port: Number(u.port || 80), model, limit };
  } catch {
    return null;
  }
}

/** `list` with `item` at its place by id (a replica already in it is replaced). */
function insertById<T extends { id: string }>(list: T[], item: T): T[] {
  const out = list.filter((x) => x.id !== item.id);
  let i = out.findIndex((x) => x.id > item.id);
  if (i < 0) i = out.length;
  out.splice(i, 0, item);
  return out;
}

/**
 * Routes requests by model among ready replicas: least in-flight first, round-robin among ties, skipping replicas
 * that just failed to connect. Serves its last table while the store cannot be read.
 */
export class RoutingTable {
  private routes = new Map<string, ModelRoutes>();
  private inFlight = new Map<string, number>();
  private readonly ejections: Ejections;
  private timer: NodeJS.Timeout | null = null;
  private refreshing = false;
  private staleSince: number | null = null;
  private readonly log: GatewayLog;
  private readonly now: () => number;
  /** Slots each replica's engine reported (null: asked, it says none; absent: not asked yet) */
  private readonly slots = new Map<string, number | null>();
  private listener: RoutingListener | null = null;
  private ejectHook: ((replica: string) => void) | null = null;
  /** The model of each replica in the table (slow paths only: admission's queue after a slot freed) */
  private modelOfReplica = new Map<string, string>();
  /** Each keyed model's hash ring, rebuilt when its ready replicas change (affinity.ts) */
  private readonly rings = new Map<string, HashRing>();
  /** Each catalog model's routing fields, as the last full read or pushed change gave them */
  private catalog = new Map<string, ModelRouteFields>();
  /** The newest route change the table holds (RouteRows.cursor, or a pushed change's seq) */
  private cursor = 0;
  /** The engines' own queue and KV-cache use, polled from the nodes' doors (engine-signals.ts) */
  readonly engineLoad = new EngineLoad();

  constructor(
    private readonly load: () => Promise<RouteRows>,
    private readonly opts: RoutingOptions,
  ) {
    this.log = opts.log ?? silentLog;
    this.now = opts.clock ?? Date.now;
    this.ejections = new Ejections({
      log: this.log,
      ejectMs: opts.ejectMs,
      ejectMaxMs: opts.ejectMaxMs,
      now: this.now,
      onEject: (id) => this.ejectHook?.(id),
    });
  }

  /** Loads the table once (errors propagate), then refreshes it every `refreshMs` in the background. */
  async start(): Promise<void> {
    await this.refresh();
    this.stop();
    this.timer = setInterval(() => {
      // A store that hangs must not pile up queries: one refresh at a time.
      if (this.refreshing) return;
      this.refreshing = true;
      this.refresh()
        .catch(() => undefined)
        .finally(() => {
          this.refreshing = false;
        });
    }, this.opts.refreshMs);
    // The refresh timer alone must not keep the process alive.
    this.timer.unref();
  }

  /** Stops the background refresh. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Reloads the table now; on failure the previous table stays, the table is marked stale and the error propagates. */
  async refresh(): Promise<void> {
    let rows: RouteRows;
    try {
      rows = await this.load();
    } catch (err) {
      this.markStale(err as Error);
      throw err;
    }
    const info = new Map<string, ModelRouteFields>();
    for (const m of rows.models)
      info.set(m, {
        routing: rows.routing?.[m],
        firstByteMs: rows.firstByteMs?.[m],
        maxConcurrent: rows.maxConcurrent?.[m],
        noEmbeddings: rows.noEmbeddings?.[m],
      });
    this.catalog = info;
    const next = new Map<string, ModelRoutes>();
    const entry = (model: string): ModelRoutes => {
      let r = next.get(model);
      if (!r) next.set(model, (r = this.newModelRoutes(model)));
      return r;
    };
    for (const m of rows.models) entry(m);
    for (const r of rows.replicas) this.place(entry(r.model), r);
    this.routes = next;
    this.modelOfReplica = new Map(rows.replicas.map((r) => [r.id, r.model]));
    this.cursor = Math.max(this.cursor, rows.cursor ?? 0);
    this.keepEjectionsRoutable();
    if (this.staleSince !== null) {
      this.log('routing table fresh again: read from the store', {
        level: 'info',
        staleForMs: this.now() - this.staleSince,
      });
      this.staleSince = null;
    }
    this.listener?.refreshed();
  }

  /** The newest route change (route_changes id) this table holds: a push subscription resumes after it. */
  get changeCursor(): number {
    return this.cursor;
  }

  /**
   * Applies one pushed route change: one replica added, moved, or removed, or one model's catalog fields — without
   * reading the store. A change older than the table (seq at or below its cursor) is applied all the same: it carries
   * the row as it is now, not as it was.
   */
  apply(change: RouteChange): void {
    if (change.kind === 'replica') this.applyReplica(change);
    else this.applyModel(change.model, change.routing);
    this.cursor = Math.max(this.cursor, change.seq);
    this.listener?.refreshed();
  }

  private applyReplica(c: Extract<RouteChange, { kind: 'replica' }>): void {
    const before = this.modelOfReplica.get(c.id);
    if (before !== undefined) {
      const r = this.routes.get(before);
      if (r) {
        // New arrays, not spliced ones: nothing that holds the old array sees it change under it.
        r.ready = r.ready.filter((x) => x.id !== c.id);
        r.waiting = r.waiting.filter((x) => x.id !== c.id);
        if (!this.catalog.has(before) && r.ready.length === 0 && r.waiting.length === 0) this.routes.delete(before);
      }
    }
    // A full read lists no stopped replica; a pushed change leaves the same table as one would.
    if (!c.replica || c.replica.state === 'stopped') {
      this.modelOfReplica.delete(c.id);
      this.slots.delete(c.id);
    } else {
      let r = this.routes.get(c.model);
      if (!r) this.routes.set(c.model, (r = this.newModelRoutes(c.model)));
      this.place(r, { id: c.id, model: c.model, ...c.replica }, true);
      this.modelOfReplica.set(c.id, c.model);
    }
    this.keepEjectionsRoutable();
  }

  private applyModel(model: string, routing: ModelRouteFields | null): void {
    const r = this.routes.get(model);
    if (!routing) {
      this.catalog.delete(model);
      if (!r) return;
      if (r.ready.length === 0 && r.waiting.length === 0) this.routes.delete(model);
      else Object.assign(r, { firstByteMs: undefined, noEmbeddings: undefined, routing: resolveRouting(undefined) });
    } else {
      this.catalog.set(model, routing);
      if (!r) {
        this.routes.set(model, this.newModelRoutes(model));
        return;
      }
      r.firstByteMs = routing.firstByteMs;
      r.noEmbeddings = routing.noEmbeddings;
      r.routing = resolveRouting(routing.routing);
    }
    for (const rep of r?.ready ?? []) rep.limit = this.limitOf(rep.id, model);
  }

  /** An empty entry for `model` with its catalog fields, keeping its round-robin cursor. */
  private newModelRoutes(model: string): ModelRoutes {
    const c = this.catalog.get(model);
    // Keep the cursor so a refresh does not send every next request to the first replica.
    return {
      ready: [],
      waiting: [],
      next: this.routes.get(model)?.next ?? 0,
      firstByteMs: c?.firstByteMs,
      noEmbeddings: c?.noEmbeddings,
      routing: resolveRouting(c?.routing),
    };
  }

  /** A replica's limit: the catalog's, else what its engine said, else the default. */
  private limitOf(id: string, model: string): number {
    return (
      this.catalog.get(model)?.maxConcurrent ?? this.slots.get(id) ?? this.opts.defaultLimit ?? DEFAULT_MAX_CONCURRENT
    );
  }

  /** Puts one replica row into its model's ready or waiting list (`sorted`: at its place by id, as a full read orders them). */
  private place(into: ModelRoutes, r: RouteRows['replicas'][number], sorted = false): void {
    const catalogLimit = this.catalog.get(r.model)?.maxConcurrent;
    const limit = this.limitOf(r.id, r.model);
    const target = r.state === 'ready' && r.endpoint ? parseEndpoint(r.id, r.model, r.endpoint, limit) : null;
    if (target && catalogLimit === undefined && !this.slots.has(r.id)) this.askSlots(target);
    if (target) {
      if (!sorted) into.ready.push(target);
      else into.ready = insertById(into.ready, target);
      return;
    }
    const waiting = {
      id: r.id,
      state: r.state,
      reason:
        r.reason ?? (r.state !== 'ready' ? null : r.endpoint ? `unusable endpoint ${r.endpoint}` : 'no endpoint yet'),
    };
    if (!sorted) into.waiting.push(waiting);
    else into.waiting = insertById(into.waiting, waiting);
  }

  /** A replica that left the table or moved to another endpoint is no longer judged by its old failures. */
  private keepEjectionsRoutable(): void {
    if (this.ejections.empty) return;
    const endpoints = new Map<string, string>();
    for (const r of this.routes.values()) for (const rep of r.ready) endpoints.set(rep.id, rep.endpoint);
    this.ejections.keepOnly(endpoints);
  }

  /** Sets who is told of each ejection (metrics). */
  onEject(hook: (replica: string) => void): void {
    this.ejectHook = hook;
  }

  /** True when the table knows `model`. */
  has(model: string): boolean {
    return this.routes.has(model);
  }

  /** Every routable replica's concurrency limit (metrics). */
  limits(): { id: string; model: string; limit: number }[] {
    return [...this.routes.values()].flatMap((r) => r.ready.map(({ id, model, limit }) => ({ id, model, limit })));
  }

  /** The model replica `id` serves, as the last table said. */
  modelOf(id: string): string | undefined {
    return this.modelOfReplica.get(id);
  }

  /** Sets who hears of freed slots and new tables (the gateway's admission). */
  listen(listener: RoutingListener): void {
    this.listener = listener;
  }

  /** Asks a new replica's engine for its slots once, off the request path; its limit follows the answer. */
  private askSlots(replica: RoutableReplica): void {
    const probe = this.opts.probeSlots;
    if (!probe) return;
    this.slots.set(replica.id, null);
    void probe(replica).then(
      (n) => {
        if (n === null) return;
        this.slots.set(replica.id, n);
        for (const r of this.routes.get(replica.model)?.ready ?? []) if (r.id === replica.id) r.limit = n;
        this.listener?.refreshed();
      },
      () => undefined,
    );
  }

  /** Routable (ready) replicas per model, as this table holds them now. */
  readyCounts(): Record<string, number> {
    return Object.fromEntries([...this.routes].map(([model, r]) => [model, r.ready.length]));
  }

  /** Why `model` cannot serve /v1/embeddings (its profiles' engines cannot), or null when it can or its engine decides. */
  embeddingRefusal(model: string): string | null {
    return this.routes.get(model)?.noEmbeddings ?? null;
  }

  /** How `model` is routed (the catalog's routing, defaults filled in), or undefined for a model not in the table. */
  routingOf(model: string): ResolvedRouting | undefined {
    return this.routes.get(model)?.routing;
  }

  /** Model names the gateway knows, sorted. */
  models(): string[] {
    return [...this.routes.keys()].sort();
  }

  /**
   * Chooses a replica of `model`, skipping the ids in `exclude` (replicas that already failed this request) and
   * ejected ones — unless every candidate is ejected: then they are tried all the same. With `admit`, a replica
   * holding its limit of requests is not chosen; `busy` when every one does (a retry ignores limits: its request
   * was admitted already). With `key` (affinity.ts: a session or prompt-prefix hash) and a keyed policy, the key's
   * replica on the hash ring, or the next one with room; least outstanding when none has room or there is no key.
   * Outstanding is this gateway's requests in flight plus, while its engine's signal is fresh, the requests the
   * engine says wait in its queue; between equals, an engine whose KV cache is clearly emptier (engine-load.ts).
   */
  pick(model: string, exclude?: Set<string>, admit = false, key: number | null = null): PickResult {
    const routes = this.routes.get(model);
    if (!routes) return { kind: 'unknown-model' };
    let candidates = exclude?.size ? routes.ready.filter((r) => !exclude.has(r.id)) : routes.ready;
    if (candidates.length === 0) return { kind: 'none-ready', reason: this.noneReadyReason(model, routes, exclude) };
    const judged = !this.ejections.empty;
    const now = judged ? this.now() : 0;
    if (judged) candidates = this.ejections.filter(candidates, now);
    const n = candidates.length;
    const policy = routes.routing.policy;
    if (key !== null && byKey(policy)) {
      const hit = this.byRing(model, routes, candidates, admit, key);
      if (hit) {
        if (judged) this.ejections.chosen(hit.id, now);
        return { kind: 'ok', replica: hit, firstByteMs: routes.firstByteMs };
      }
    }
    // A retry (exclude set) does not move the cursor: with two replicas it would otherwise always hand the next
    // request to the one that just failed it.
    const start = (exclude?.size ? routes.next : routes.next++) % n;
    let best = candidates[start];
    let bestLoad = this.loadOf(best.id);
    let bestKv = this.engineLoad.kvUsage(best.id);
    // Round robin (for comparison) takes the cursor's replica whatever it holds.
    for (let i = 1; i < n && (bestLoad > 0 || bestKv >= KV_FULL) && policy !== 'round-robin'; i++) {
      const c = candidates[(start + i) % n];
      const load = this.loadOf(c.id);
      const kv = this.engineLoad.kvUsage(c.id);
      // Fewer requests outstanding wins; between equals, a KV cache clearly emptier (the engine's own signal).
      if (load < bestLoad || (load === bestLoad && kv + KV_MARGIN < bestKv)) {
        best = c;
        bestLoad = load;
        bestKv = kv;
      }
    }
    // Admission counts only this gateway's own requests against a replica's limit (the queue is the engine's).
    if (admit && (this.inFlight.get(best.id) ?? 0) >= best.limit) {
      // Least loaded is full; another with a larger limit may still have room (replicas of different engines).
      const roomy = candidates.find((c) => (this.inFlight.get(c.id) ?? 0) < c.limit);
      if (!roomy) return BUSY;
      best = roomy;
    }
    if (judged) this.ejections.chosen(best.id, now);
    return { kind: 'ok', replica: best, firstByteMs: routes.firstByteMs };
  }

  /**
   * Bounded-load consistent hashing (Mirrokni et al.): walking the ring from `key`, the first candidate holding
   * at most ceil(loadFactor × (the model's requests outstanding + 1) / candidates) — and, with `admit`, fewer than
   * its own limit. A replica that left the table is not on the ring; one that failed this request, or is ejected,
   * is passed over, so a dead target costs a step of the walk, not an error. Null when none qualifies.
   */
  private byRing(
    model: string,
    routes: ModelRoutes,
    candidates: RoutableReplica[],
    admit: boolean,
    key: number,
  ): RoutableReplica | null {
    let ring = this.rings.get(model);
    if (!ring || !ring.matches(routes.ready)) {
      // Over every ready replica, not just this request's candidates: keys stay put while one is ejected.
      ring = new HashRing(routes.ready);
      this.rings.set(model, ring);
    }
    let total = 0;
    for (const c of candidates) total += this.loadOf(c.id);
    // One more than the share: with a few requests in flight the share rounds to 1, and a key's replica would
    // spill its keys (and their cached prefixes) at its second request while the others idle.
    const cap = Math.ceil((routes.routing.loadFactor * (total + 1)) / candidates.length) + 1;
    const all = candidates.length === routes.ready.length;
    return ring.walk(key, routes.ready, (r) => {
      if (!all && !candidates.includes(r)) return false;
      const load = this.loadOf(r.id);
      return load < cap && (!admit || (this.inFlight.get(r.id) ?? 0) < r.limit);
    });
  }

  /**
   * Skips `replica` for new requests after it failed to connect: for ejectMs at first, doubling up to ejectMaxMs
   * while it keeps failing. Requests already in flight to it count once, not once each.
   */
  eject(replica: Ejectable, error: string): void {
    this.ejections.eject(replica, error);
  }

  /** Takes `id` back after it answered (any HTTP status: it connects again). */
  healthy(id: string): void {
    if (!this.ejections.empty) this.ejections.healthy(id);
  }

  /** True while `id` is skipped for new requests. */
  isEjected(id: string): boolean {
    return this.ejections.has(id);
  }

  /**
   * A replica's requests outstanding as the pick weighs them: this gateway's in flight on it, plus the requests its
   * engine said were waiting (other gateways' and clients' too) while that signal is fresh.
   */
  private loadOf(id: string): number {
    return (this.inFlight.get(id) ?? 0) + this.engineLoad.waiting(id);
  }

  /** The nodes' doors behind which this table routes replicas, each once: where engine signals are polled. */
  doors(): { host: string; port: number; node: string }[] {
    const seen = new Map<string, { host: string; port: number; node: string }>();
    for (const r of this.routes.values())
      for (const x of r.ready)
        if (x.door) seen.set(`${x.host}|${x.port}|${x.door.node}`, { host: x.host, port: x.port, node: x.door.node });
    return [...seen.values()];
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
    this.listener?.freed(id);
  }

  /** The replicas this table routes and the requests in flight per replica: what the gateway reports for drains. */
  report(): GatewayReport {
    return {
      routed: [...this.routes.values()].flatMap((r) => r.ready.map((x) => x.id)).sort(),
      inflight: Object.fromEntries(this.inFlight),
    };
  }

  /** Requests in flight on replica `id` through this gateway. */
  inFlightOf(id: string): number {
    return this.inFlight.get(id) ?? 0;
  }

  /** Logs once when the store cannot be read, not on every refresh while it stays so. */
  private markStale(err: Error): void {
    if (this.staleSince !== null) return;
    this.staleSince = this.now();
    this.log('routing table stale: cannot read the store; serving the last table', {
      level: 'warn',
      error: err.message,
    });
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
