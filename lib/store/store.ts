/** The cluster's current state in MySQL: nodes, models, replicas, shards, port leases, events. */
import type { Pool, RowDataPacket, ResultSetHeader } from 'mysql2/promise';
import { groupBy } from '../group';
import { DB_LOCK_NAME } from './db';
import { MODEL_ROUTING_COLUMNS, modelRouting, RouteChanges, writeWithRouteChange } from './route-changes';
import type {
  EngineStatus,
  ModelRouting,
  ModelSpec,
  NodeId,
  NodeInventory,
  NodeRecord,
  NodeState,
  ReplicaRecord,
  ReplicaState,
  ShardAssignment,
} from '../types';

/** A placed shard: where it runs and the GPU indices it holds there. */
export interface ShardRow extends ShardAssignment {
  replicaId: string;
  gpus: number[];
}

export interface EventInput {
  kind: string;
  message: string;
  nodeId?: string;
  model?: string;
  replicaId?: string;
}

export interface RouteRows {
  models: string[];
  replicas: { id: string; model: string; state: string; endpoint: string | null; reason: string | null }[];
  /** The catalog's first-byte timeout (ms) of each model that sets one */
  firstByteMs?: Record<string, number>;
  /** The catalog's per-replica concurrency limit of each model that sets one (maxConcurrent) */
  maxConcurrent?: Record<string, number>;
  /** Models none of whose profiles can serve /v1/embeddings, with why (lib/engines embeddingRefusal) */
  noEmbeddings?: Record<string, string>;
  /** The catalog's routing of each model that sets one (unset: least outstanding) */
  routing?: Record<string, ModelRouting>;
  /** The newest route change (table route_changes) these rows include; changes after it may not be in them */
  cursor?: number;
}

const json = <T>(v: unknown): T => (typeof v === 'string' ? (JSON.parse(v) as T) : (v as T));

/**
 * Shards placed before migration 10 recorded a GPU count only: each is taken to hold its node's lowest indices that
 * no shard with recorded indices holds (an engine without CUDA_VISIBLE_DEVICES starts on GPU 0 and up).
 */
export function legacyGpus(rows: (Omit<ShardRow, 'gpus'> & { gpus: number[] | null; count: number })[]): ShardRow[] {
  const held = new Map<string, Set<number>>();
  for (const r of rows)
    if (r.gpus) for (const g of r.gpus) held.set(r.nodeId, (held.get(r.nodeId) ?? new Set()).add(g));
  return rows.map(({ count, ...r }) => {
    if (r.gpus) return { ...r, gpus: r.gpus };
    const taken = held.get(r.nodeId) ?? new Set<number>();
    const gpus: number[] = [];
    for (let i = 0; gpus.length < count; i++) if (!taken.has(i)) gpus.push(i);
    for (const g of gpus) taken.add(g);
    held.set(r.nodeId, taken);
    return { ...r, gpus };
  });
}

/** Per pool and lock name, the last caller of withLock in this process (they run one after another). */
const LOCK_QUEUES = new WeakMap<object, Map<string, Promise<unknown>>>();

/** A nodes row as a NodeRecord. */
function nodeRecord(r: RowDataPacket): NodeRecord {
  return {
    id: r.id as NodeId,
    state: r.state as NodeState,
    inventory: json<NodeInventory>(r.inventory),
    lastSeen: r.last_seen ? new Date(r.last_seen) : null,
    registeredAt: new Date(r.registered_at),
    engineStatus: r.engine_status ? json<EngineStatus[]>(r.engine_status) : null,
    enginesConfig: (r.engines_config as string | null) ?? null,
  };
}

/** Every read and write of cluster state goes through this class. Writes are idempotent. */
export class Store {
  private readonly routeListeners = new Set<() => void>();

  constructor(readonly pool: Pool) {}

  /**
   * Calls `fn` after each route change this Store wrote (the control plane's route feed then pushes it at once,
   * not at its next tail of route_changes); returns the unsubscribe.
   */
  onRouteChange(fn: () => void): () => void {
    this.routeListeners.add(fn);
    return () => this.routeListeners.delete(fn);
  }

  private routeChanged(): void {
    for (const fn of this.routeListeners) fn();
  }

  /** Registers a node or refreshes its inventory; a cordoned node stays cordoned; registered_at is the latest (agent start). */
  async upsertNode(id: NodeId, inventory: NodeInventory): Promise<void> {
    await this.pool.query(
      `INSERT INTO nodes (id, state, inventory, last_seen, registered_at) VALUES (?, 'ready', ?, NOW(3), NOW(3))
       ON DUPLICATE KEY UPDATE inventory = VALUES(inventory), last_seen = NOW(3), registered_at = NOW(3),
         state = IF(cordoned, 'cordoned', 'ready')`,
      [id, JSON.stringify(inventory)],
    );
  }

  /** A node's state, or null when it is not registered. */
  async nodeState(id: NodeId): Promise<NodeState | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT state FROM nodes WHERE id = ?', [id]);
    return rows[0] ? (rows[0].state as NodeState) : null;
  }

  /** Records a heartbeat; returns the state the node had before (a down node is ready again), or null when not registered. */
  async heartbeat(id: NodeId): Promise<NodeState | null> {
    const before = await this.nodeState(id);
    if (before === null) return null;
    await this.pool.query(
      `UPDATE nodes SET last_seen = NOW(3), state = IF(state = 'down', IF(cordoned, 'cordoned', 'ready'), state) WHERE id = ?`,
      [id],
    );
    return before;
  }

  /**
   * Nodes not down whose `last_seen` is older than `ms` (by MySQL's clock), each with the address its engines are
   * reached at, the ports of the shards placed on it, how long ago `last_seen` was and its exact value (`seen`, for
   * markNodeDownIfSeen): the node liveness service's suspects.
   */
  async silentNodes(
    ms: number,
  ): Promise<{ id: NodeId; host: string; ports: number[]; silentMs: number; seen: string }[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      `SELECT n.id, JSON_UNQUOTE(JSON_EXTRACT(n.inventory, '$.host')) AS host, GROUP_CONCAT(s.port) AS ports,
              JSON_EXTRACT(n.inventory, '$.door.port') AS door_port,
              TIMESTAMPDIFF(MICROSECOND, n.last_seen, NOW(3)) DIV 1000 AS silent_ms, CAST(n.last_seen AS CHAR) AS seen
         FROM nodes n LEFT JOIN shards s ON s.node_id = n.id
        WHERE n.state <> 'down' AND n.last_seen < NOW(3) - INTERVAL ? MICROSECOND
        GROUP BY n.id, n.inventory`,
      [ms * 1000],
    );
    return rows.map((r) => ({
      id: r.id as NodeId,
      host: String(r.host ?? ''),
      // The node's door first: engines listen on the node's loopback behind it (a door that accepts is an agent
      // process alive, however starved), and an older agent's engines on the node's address.
      ports: [
        ...(r.door_port == null ? [] : [Number(r.door_port)]),
        ...(r.ports ? String(r.ports).split(',').map(Number) : []),
      ],
      silentMs: Number(r.silent_ms),
      seen: String(r.seen),
    }));
  }

  /**
   * Marks a node down if its `last_seen` is still `seen` (as silentNodes read it): a beat written meanwhile, by any
   * control plane, wins. True when this call did, so one control plane alone reports the loss.
   */
  async markNodeDownIfSeen(id: NodeId, seen: string): Promise<boolean> {
    const [r] = await this.pool.query<ResultSetHeader>(
      `UPDATE nodes SET state = 'down' WHERE id = ? AND state <> 'down' AND last_seen = CAST(? AS DATETIME(3))`,
      [id, seen],
    );
    return r.affectedRows > 0;
  }

  /**
   * Cordons ('cordoned') or uncordons ('ready') a node; 'down' marks it down. A down node stays down until it
   * is seen again, and then comes back cordoned if it was cordoned.
   */
  async setNodeState(id: string, state: NodeState): Promise<boolean> {
    const [r] =
      state === 'down'
        ? await this.pool.query<ResultSetHeader>(`UPDATE nodes SET state = 'down' WHERE id = ?`, [id])
        : await this.pool.query<ResultSetHeader>(
            `UPDATE nodes SET cordoned = ?, state = IF(state = 'down', 'down', ?) WHERE id = ?`,
            [state === 'cordoned' ? 1 : 0, state, id],
          );
    return r.affectedRows > 0;
  }

  /** True when the operator cordoned the node (whether or not it is down now). */
  async isCordoned(id: string): Promise<boolean> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT cordoned FROM nodes WHERE id = ?', [id]);
    return Boolean(rows[0]?.cordoned);
  }

  /** All nodes, by id. */
  async listNodes(): Promise<NodeRecord[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT * FROM nodes ORDER BY id');
    return rows.map(nodeRecord);
  }

  /** One node, or null when it is not registered (its row alone: every node's inventory is ~2 KB of JSON to parse). */
  async node(id: NodeId): Promise<NodeRecord | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT * FROM nodes WHERE id = ?', [id]);
    return rows[0] ? nodeRecord(rows[0]) : null;
  }

  /**
   * Records a node's engine probe: each engine's status, the config hash it was checked against, and the
   * engines it offers into its inventory (what placement reads). Returns false for an unknown node.
   */
  async recordEngines(id: NodeId, statuses: EngineStatus[], configHash: string): Promise<boolean> {
    const offered = statuses.filter((s) => s.state === 'offered').map((s) => s.engine);
    const [r] = await this.pool.query<ResultSetHeader>(
      `UPDATE nodes SET engine_status = ?, engines_config = ?, engines_checked_at = NOW(3), inventory = JSON_SET(inventory, '$.engines', JSON_EXTRACT(?, '$')) WHERE id = ?`,
      [JSON.stringify(statuses), configHash, JSON.stringify(offered), id],
    );
    return r.affectedRows > 0;
  }

  /** Writes a catalog model; `keepDesired` leaves an existing desired count alone (it is changed by scale). */
  async upsertModel(spec: ModelSpec, keepDesired = true): Promise<void> {
    await writeWithRouteChange(this.pool, { replicaId: null, model: spec.name }, (conn) =>
      conn.query(
        `INSERT INTO models (name, source, desired_replicas, spec, updated_at) VALUES (?, ?, ?, ?, NOW(3))
       ON DUPLICATE KEY UPDATE source = VALUES(source), spec = VALUES(spec), updated_at = NOW(3)
       ${keepDesired ? '' : ', desired_replicas = VALUES(desired_replicas)'}`,
        [spec.name, spec.source, spec.replicas, JSON.stringify(spec)],
      ),
    );
    this.routeChanged();
  }

  /** Forgets a model (removed from the catalog); its replicas' rows stay, stopped, as history. */
  async deleteModel(name: string): Promise<void> {
    await writeWithRouteChange(this.pool, { replicaId: null, model: name }, (conn) =>
      conn.query('DELETE FROM models WHERE name = ?', [name]),
    );
    this.routeChanged();
  }

  /** Every model as last applied: the catalog spec recorded (its `replicas` the catalog's count then) and the live desired count. */
  async appliedModels(): Promise<{ applied: ModelSpec; desired: number }[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT spec, desired_replicas FROM models ORDER BY name');
    return rows.map((r) => ({ applied: json<ModelSpec>(r.spec), desired: Number(r.desired_replicas) }));
  }

  /** Sets the desired replica count of a model. */
  async setDesiredReplicas(name: string, n: number): Promise<void> {
    await this.pool.query('UPDATE models SET desired_replicas = ?, updated_at = NOW(3) WHERE name = ?', [n, name]);
  }

  /** One model with its desired count, or null. */
  async getModel(name: string): Promise<ModelSpec | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT * FROM models WHERE name = ?', [name]);
    const r = rows[0];
    return r ? { ...json<ModelSpec>(r.spec), replicas: Number(r.desired_replicas) } : null;
  }

  /** All models with their desired counts. */
  async listModels(): Promise<ModelSpec[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT * FROM models ORDER BY name');
    return rows.map((r) => ({ ...json<ModelSpec>(r.spec), replicas: Number(r.desired_replicas) }));
  }

  /** Creates or updates a replica's state row. `endpoint` undefined leaves it unchanged. */
  async setReplica(r: {
    id: string;
    model: string;
    profile: string;
    state: ReplicaState;
    reason?: string | null;
    endpoint?: string | null;
  }): Promise<void> {
    const keepEndpoint = r.endpoint === undefined;
    // The route change in the same transaction: a gateway is told of every state a reader can see.
    await writeWithRouteChange(this.pool, { replicaId: r.id, model: r.model }, (conn) =>
      conn.query(
        `INSERT INTO replicas (id, model, profile, state, reason, endpoint, updated_at) VALUES (?, ?, ?, ?, ?, ?, NOW(3))
       ON DUPLICATE KEY UPDATE state = VALUES(state), reason = VALUES(reason), profile = VALUES(profile),
         updated_at = NOW(3) ${keepEndpoint ? '' : ', endpoint = VALUES(endpoint)'}`,
        [r.id, r.model, r.profile, r.state, r.reason ?? null, r.endpoint ?? null],
      ),
    );
    this.routeChanged();
  }

  /**
   * Marks a replica ready at `endpoint`, only if it is still `starting` on the placement whose rank 0 is
   * `rank0` (a health wait that outlived its placement — cancelled, the replica stopped or rebuilt elsewhere —
   * changes nothing). True when it did.
   */
  async markReady(r: {
    id: string;
    model: string;
    endpoint: string;
    rank0: { nodeId: string; port: number };
  }): Promise<boolean> {
    let marked = false;
    await writeWithRouteChange(this.pool, { replicaId: r.id, model: r.model }, async (conn) => {
      const [res] = await conn.query<ResultSetHeader>(
        `UPDATE replicas SET state = 'ready', reason = NULL, endpoint = ?, updated_at = NOW(3)
         WHERE id = ? AND state = 'starting'
           AND EXISTS (SELECT 1 FROM shards WHERE replica_id = ? AND \`rank\` = 0 AND node_id = ? AND port = ?)`,
        [r.endpoint, r.id, r.id, r.rank0.nodeId, r.rank0.port],
      );
      marked = res.affectedRows === 1;
    });
    if (marked) this.routeChanged();
    return marked;
  }

  /** Replicas (optionally of one model) with their shards. */
  async listReplicas(model?: string): Promise<ReplicaRecord[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      `SELECT * FROM replicas ${model ? 'WHERE model = ?' : ''} ORDER BY model, id`,
      model ? [model] : [],
    );
    // Grouped once, not filtered per replica: at 5,000 replicas that filter held the event loop 63-85 ms a call.
    const byReplica = groupBy(await this.listShards(), (s) => s.replicaId);
    return rows.map((r) => ({
      id: r.id,
      model: r.model,
      profile: r.profile,
      state: r.state as ReplicaState,
      reason: r.reason,
      endpoint: r.endpoint,
      shards: (byReplica.get(r.id) ?? []).map(({ rank, nodeId, port, gpus }) => ({ rank, nodeId, port, gpus })),
      updatedAt: new Date(r.updated_at),
    }));
  }

  /** One replica's recorded state, or null when it has no row. */
  async replicaState(id: string): Promise<ReplicaState | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT state FROM replicas WHERE id = ?', [id]);
    return (rows[0]?.state as ReplicaState | undefined) ?? null;
  }

  /** The ids of the replicas in `state`. */
  async replicaIdsIn(state: ReplicaState): Promise<string[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT id FROM replicas WHERE state = ? ORDER BY id', [
      state,
    ]);
    return rows.map((r) => r.id as string);
  }

  /** Every placed shard, with the GPU indices it holds (rows from before migration 10 get theirs by legacyGpus). */
  async listShards(): Promise<ShardRow[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT * FROM shards ORDER BY replica_id, `rank`');
    return legacyGpus(
      rows.map((r) => ({
        replicaId: r.replica_id,
        rank: r.rank,
        nodeId: r.node_id as NodeId,
        port: r.port,
        gpus: r.gpu_indices === null ? null : json<number[]>(r.gpu_indices),
        count: Number(r.gpus),
      })),
    );
  }

  /** The GPU indices held on each node by placed shards, leaving out those of some replicas (the one being placed). */
  async heldGpus(except: string[] = []): Promise<Record<string, number[]>> {
    const held: Record<string, number[]> = {};
    for (const s of await this.listShards())
      if (!except.includes(s.replicaId)) held[s.nodeId] = [...(held[s.nodeId] ?? []), ...s.gpus];
    return held;
  }

  /**
   * Leases `n` free ports on `host` within [base, base+count) for a replica: ports never leased first, then
   * those released longest ago (never the one just given up, which a stale route may still name).
   */
  async leasePorts(
    host: string,
    replicaId: string,
    n: number,
    range: { base: number; count: number },
  ): Promise<number[]> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const [rows] = await this.pool.query<RowDataPacket[]>(
        'SELECT port, released_at FROM port_leases WHERE host = ?',
        [host],
      );
      const taken = new Set<number>();
      const releasedAt = new Map<number, number>();
      for (const r of rows) {
        if (r.released_at === null) taken.add(Number(r.port));
        else releasedAt.set(Number(r.port), new Date(r.released_at).getTime());
      }
      const free: number[] = [];
      for (let p = range.base; p < range.base + range.count; p++) if (!taken.has(p)) free.push(p);
      if (free.length < n)
        throw new Error(
          `no free engine ports left on ${host} in ${range.base}-${range.base + range.count - 1}: widen enginePorts in server.yaml`,
        );
      const ports = free.sort((a, b) => (releasedAt.get(a) ?? -1) - (releasedAt.get(b) ?? -1) || a - b).slice(0, n);
      const fresh = ports.filter((p) => !releasedAt.has(p));
      const reused = ports.filter((p) => releasedAt.has(p));
      try {
        if (fresh.length)
          await this.pool.query('INSERT INTO port_leases (host, port, replica_id) VALUES ?', [
            fresh.map((p) => [host, p, replicaId]),
          ]);
        // Take a released row back only while it is still released (a concurrent lease may have taken it).
        const [res] = reused.length
          ? await this.pool.query<ResultSetHeader>(
              'UPDATE port_leases SET replica_id = ?, released_at = NULL WHERE host = ? AND port IN (?) AND released_at IS NOT NULL',
              [replicaId, host, reused],
            )
          : [{ affectedRows: 0 } as ResultSetHeader];
        if (res.affectedRows === reused.length) return ports;
        await this.pool.query(
          'UPDATE port_leases SET replica_id = NULL, released_at = NOW(3) WHERE replica_id = ? AND host = ? AND port IN (?)',
          [replicaId, host, ports],
        );
      } catch (err) {
        if ((err as { code?: string }).code !== 'ER_DUP_ENTRY') throw err;
      }
    }
    throw new Error(`could not lease ports on ${host}: too much contention`);
  }

  /** Records a replica's placement (replacing any earlier one). */
  async setShards(replicaId: string, shards: ShardRow[]): Promise<void> {
    await this.pool.query('DELETE FROM shards WHERE replica_id = ?', [replicaId]);
    await this.addShards(replicaId, shards);
  }

  /** Records the shards of a replica that has none recorded (released first, as a placement batch does). */
  async addShards(replicaId: string, shards: ShardRow[]): Promise<void> {
    if (shards.length)
      await this.pool.query('INSERT INTO shards (replica_id, `rank`, node_id, port, gpus, gpu_indices) VALUES ?', [
        shards.map((s) => [replicaId, s.rank, s.nodeId, s.port, s.gpus.length, JSON.stringify(s.gpus)]),
      ]);
  }

  /** Forgets a replica's shards and port leases. */
  async releaseReplica(replicaId: string): Promise<void> {
    await this.releaseReplicas([replicaId]);
  }

  /** Forgets the shards and port leases of several replicas, in two statements (a placement batch's 100 at once). */
  async releaseReplicas(replicaIds: string[]): Promise<void> {
    if (replicaIds.length === 0) return;
    await this.pool.query('DELETE FROM shards WHERE replica_id IN (?)', [replicaIds]);
    await this.pool.query('UPDATE port_leases SET replica_id = NULL, released_at = NOW(3) WHERE replica_id IN (?)', [
      replicaIds,
    ]);
  }

  /**
   * What the gateway routes by: catalog models (with their first-byte timeouts) and every replica's state, and the
   * route change cursor they are at least as new as (read first: a change after it is pushed again).
   */
  async routeRows(): Promise<RouteRows> {
    const cursor = await new RouteChanges(this.pool).latest();
    // The timeout lives in the model's spec JSON; JSON_EXTRACT reads just it (NULL when the catalog sets none).
    const [models] = await this.pool.query<RowDataPacket[]>(
      `SELECT name, ${MODEL_ROUTING_COLUMNS} FROM models ORDER BY name`,
    );
    const [reps] = await this.pool.query<RowDataPacket[]>(
      `SELECT id, model, state, endpoint, reason FROM replicas WHERE state <> 'stopped' ORDER BY id`,
    );
    const firstByteMs: Record<string, number> = {};
    const noEmbeddings: Record<string, string> = {};
    const maxConcurrent: Record<string, number> = {};
    const routing: Record<string, ModelRouting> = {};
    for (const m of models) {
      const name = String(m.name);
      const r = modelRouting(m);
      if (r.maxConcurrent !== undefined) maxConcurrent[name] = r.maxConcurrent;
      if (r.firstByteMs !== undefined) firstByteMs[name] = r.firstByteMs;
      if (r.noEmbeddings !== undefined) noEmbeddings[name] = r.noEmbeddings;
      if (r.routing) routing[name] = r.routing;
    }
    return {
      models: models.map((m) => String(m.name)),
      replicas: reps.map((r) => ({ id: r.id, model: r.model, state: r.state, endpoint: r.endpoint, reason: r.reason })),
      firstByteMs,
      maxConcurrent,
      noEmbeddings,
      routing,
      cursor,
    };
  }

  /**
   * Runs `fn` holding a MySQL named lock (cluster-wide mutex across processes; the name is scoped to this database,
   * see DB_LOCK_NAME). Callers in this process queue here
   * first, so at most one of the pool's connections waits in GET_LOCK per name: with every connection waiting there
   * (eight placements at once; llmgw sim-fleet's 20 nodes did it) the holder found none for its own queries, and
   * every placement timed out after 30 s, again and again.
   */
  async withLock<T>(name: string, timeoutS: number, fn: () => Promise<T>): Promise<T> {
    const queues = LOCK_QUEUES.get(this.pool) ?? new Map<string, Promise<unknown>>();
    LOCK_QUEUES.set(this.pool, queues);
    const run = (queues.get(name) ?? Promise.resolve()).then(() => this.withMysqlLock(name, timeoutS, fn));
    const settled = run.catch(() => undefined);
    queues.set(name, settled);
    void settled.then(() => {
      if (queues.get(name) === settled) queues.delete(name);
    });
    return run;
  }

  private async withMysqlLock<T>(name: string, timeoutS: number, fn: () => Promise<T>): Promise<T> {
    const conn = await this.pool.getConnection();
    try {
      const [rows] = await conn.query<RowDataPacket[]>(`SELECT GET_LOCK(${DB_LOCK_NAME}, ?) AS got`, [name, timeoutS]);
      if (rows[0]?.got !== 1) throw new Error(`timed out after ${timeoutS}s waiting for lock ${name}`);
      try {
        return await fn();
      } finally {
        await conn.query(`SELECT RELEASE_LOCK(${DB_LOCK_NAME})`, [name]).catch(() => undefined);
      }
    } finally {
      conn.release();
    }
  }

  /** Appends to the event log. */
  async event(e: EventInput): Promise<void> {
    await this.pool.query(
      'INSERT INTO events (at, kind, node_id, model, replica_id, message) VALUES (NOW(3), ?, ?, ?, ?, ?)',
      [e.kind, e.nodeId ?? null, e.model ?? null, e.replicaId ?? null, e.message],
    );
  }

  /** The newest events, newest first. */
  async recentEvents(limit = 50): Promise<(EventInput & { at: Date })[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT * FROM events ORDER BY id DESC LIMIT ?', [limit]);
    return rows.map((r) => ({
      at: new Date(r.at),
      kind: r.kind,
      message: r.message,
      nodeId: r.node_id ?? undefined,
      model: r.model ?? undefined,
      replicaId: r.replica_id ?? undefined,
    }));
  }

  /** Records an issued certificate; a serial already recorded is an error (serials are random and never reused). */
  async recordCertificate(c: NewCertificate): Promise<void> {
    await this.pool.query(
      `INSERT INTO certificates (serial, cn, role, not_before, not_after, issued_at, pem) VALUES (?, ?, ?, ?, ?, NOW(3), ?)`,
      [c.serial, c.cn, c.role, c.notBefore, c.notAfter, c.pem],
    );
  }

  /** Issued certificates (optionally of one CN), newest first. */
  async listCertificates(filter: { cn?: string } = {}): Promise<CertificateRecord[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      `SELECT * FROM certificates ${filter.cn === undefined ? '' : 'WHERE cn = ?'} ORDER BY issued_at DESC, serial`,
      filter.cn === undefined ? [] : [filter.cn],
    );
    return rows.map(certificateRow);
  }

  /** Marks every unrevoked certificate of `cn` revoked, with the reason cut to what the column holds; returns how many were. */
  async revokeCertificates(cn: string, reason: string): Promise<number> {
    const [r] = await this.pool.query<ResultSetHeader>(
      'UPDATE certificates SET revoked_at = NOW(3), revoked_reason = ? WHERE cn = ? AND revoked_at IS NULL',
      [cutRevocationReason(reason).reason, cn],
    );
    return r.affectedRows;
  }

  /** One certificate by its serial (lowercase hex), or null. */
  async certificateBySerial(serial: string): Promise<CertificateRecord | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT * FROM certificates WHERE serial = ?', [
      serial.toLowerCase(),
    ]);
    return rows[0] ? certificateRow(rows[0]) : null;
  }

  /** Records that the Temporal door handed the task token with this digest to node `cn`. */
  async rememberTaskToken(cn: string, digest: string): Promise<void> {
    await this.pool.query('INSERT IGNORE INTO door_task_tokens (cn, digest, handed_at) VALUES (?, ?, ?)', [
      cn,
      digest,
      new Date(),
    ]);
  }

  /** True when the door handed this token to `cn` and it is not over yet. */
  async hasTaskToken(cn: string, digest: string): Promise<boolean> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      'SELECT 1 FROM door_task_tokens WHERE cn = ? AND digest = ?',
      [cn, digest],
    );
    return rows.length > 0;
  }

  /** Forgets a token whose task is over. */
  async forgetTaskToken(cn: string, digest: string): Promise<void> {
    await this.pool.query('DELETE FROM door_task_tokens WHERE cn = ? AND digest = ?', [cn, digest]);
  }

  /** Drops tokens handed out before `before` (tasks whose worker died unanswered); returns how many. */
  async pruneTaskTokens(before: Date): Promise<number> {
    const [r] = await this.pool.query<ResultSetHeader>('DELETE FROM door_task_tokens WHERE handed_at < ?', [before]);
    return r.affectedRows;
  }

  /** Every revoked certificate: what the CRL lists. */
  async revokedSerials(): Promise<RevokedSerial[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      'SELECT serial, cn, revoked_at, not_after FROM certificates WHERE revoked_at IS NOT NULL ORDER BY revoked_at, serial',
    );
    return rows.map((r) => ({
      serial: String(r.serial),
      cn: String(r.cn),
      revokedAt: new Date(r.revoked_at),
      notAfter: new Date(r.not_after),
    }));
  }
}

/** The most characters of a revocation reason the certificates table holds (revoked_reason VARCHAR(255)). */
export const REVOCATION_REASON_MAX = 255;

/** A revocation reason as the store records it: cut to REVOCATION_REASON_MAX characters (ending in …), and whether it was. */
export function cutRevocationReason(reason: string): { reason: string; cut: boolean } {
  const chars = Array.from(reason);
  return chars.length <= REVOCATION_REASON_MAX
    ? { reason, cut: false }
    : { reason: `${chars.slice(0, REVOCATION_REASON_MAX - 1).join('')}…`, cut: true };
}

/** What the CA issued a certificate for. */
export type CertificateRole = 'node' | 'server' | 'operator' | 'gateway';

/** A certificate as recorded when it is issued. */
export interface NewCertificate {
  /** lowercase hex */
  serial: string;
  cn: string;
  role: CertificateRole;
  notBefore: Date;
  notAfter: Date;
  pem: string;
}

/** A recorded certificate with its revocation state. */
export interface CertificateRecord extends NewCertificate {
  issuedAt: Date;
  revokedAt: Date | null;
  revokedReason: string | null;
}

/** A revoked certificate's entry in the CRL. */
export interface RevokedSerial {
  serial: string;
  cn: string;
  revokedAt: Date;
  notAfter: Date;
}

function certificateRow(r: RowDataPacket): CertificateRecord {
  return {
    serial: String(r.serial),
    cn: String(r.cn),
    role: r.role as CertificateRole,
    notBefore: new Date(r.not_before),
    notAfter: new Date(r.not_after),
    issuedAt: new Date(r.issued_at),
    revokedAt: r.revoked_at ? new Date(r.revoked_at) : null,
    revokedReason: r.revoked_reason ?? null,
    pem: String(r.pem),
  };
}
