/**
 * Table route_changes (migration 15): one row per change of what the gateways route, written in the same
 * transaction as the change itself. Control planes tail it by id and push each change to their subscribed
 * gateways (gateway/control/route-feed.ts); a change carries the row as it is when read, never as it was.
 */
import type { Pool, PoolConnection, ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import { embeddingRefusal } from '../engines/registry';
import type { ModelRouting, ModelSpec } from '../types';

/** A model's catalog fields that the gateway's routing table reads. */
export interface ModelRouteFields {
  /** The catalog's routing (levels: session, prefix, least outstanding) */
  routing?: ModelRouting;
  firstByteMs?: number;
  maxConcurrent?: number;
  /** Why none of its profiles can serve /v1/embeddings */
  noEmbeddings?: string;
}

/** A replica's routing fields as its row holds them. */
export interface ReplicaRouting {
  state: string;
  endpoint: string | null;
  reason: string | null;
}

/** One change, with the changed row as read now (null: the row is gone). `seq` is its route_changes id. */
export type RouteChange =
  | { kind: 'replica'; seq: number; id: string; model: string; replica: ReplicaRouting | null }
  | { kind: 'model'; seq: number; model: string; routing: ModelRouteFields | null };

/** The SELECT columns modelRouting reads, from the models table under `alias`. */
export function modelRoutingColumns(alias = ''): string {
  const spec = alias ? `${alias}.spec` : 'spec';
  return `JSON_EXTRACT(${spec}, '$.firstByteMs') AS first_byte_ms, JSON_EXTRACT(${spec}, '$.maxConcurrent') AS max_concurrent, JSON_EXTRACT(${spec}, '$.profiles') AS profiles, JSON_EXTRACT(${spec}, '$.routing') AS routing`;
}

/** modelRoutingColumns() of the models table itself. */
export const MODEL_ROUTING_COLUMNS = modelRoutingColumns();

const json = <T>(v: unknown): T => (typeof v === 'string' ? (JSON.parse(v) as T) : (v as T));

/** A model row's routing fields (selected by modelRoutingColumns). */
export function modelRouting(m: RowDataPacket): ModelRouteFields {
  const out: ModelRouteFields = {};
  const routing = json<ModelRouting | null>(m.routing);
  if (routing) out.routing = routing;
  if (m.max_concurrent !== null && Number(m.max_concurrent) > 0) out.maxConcurrent = Number(m.max_concurrent);
  if (m.first_byte_ms !== null && Number(m.first_byte_ms) > 0) out.firstByteMs = Number(m.first_byte_ms);
  const refusal = embeddingRefusal(json<ModelSpec['profiles'] | null>(m.profiles) ?? []);
  if (refusal) out.noEmbeddings = refusal;
  return out;
}

/**
 * Runs `write` and records a route change for `replicaId` (null: the model `model` itself) in one transaction,
 * so a tailing control plane never sees a change without its row, nor a row without its change.
 */
export async function writeWithRouteChange(
  pool: Pool,
  change: { replicaId: string | null; model: string },
  write: (conn: PoolConnection) => Promise<unknown>,
): Promise<void> {
  const conn = await pool.getConnection();
  try {
    await conn.beginTransaction();
    await write(conn);
    await conn.query('INSERT INTO route_changes (at, replica_id, model) VALUES (NOW(3), ?, ?)', [
      change.replicaId,
      change.model,
    ]);
    await conn.commit();
  } catch (err) {
    await conn.rollback().catch(() => undefined);
    throw err;
  } finally {
    conn.release();
  }
}

/** Reads of route_changes: the newest id, the changes after an id, pruning. */
export class RouteChanges {
  constructor(private readonly pool: Pool) {}

  /** The newest change's id (0: none). */
  async latest(): Promise<number> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT COALESCE(MAX(id), 0) AS id FROM route_changes');
    return Number(rows[0]?.id ?? 0);
  }

  /** The oldest change still kept (null: none). */
  async oldest(): Promise<number | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT MIN(id) AS id FROM route_changes');
    return rows[0]?.id === null || rows[0]?.id === undefined ? null : Number(rows[0].id);
  }

  /**
   * Up to `limit` changes with ids above `after` (and at most `upTo`), oldest first, each with its row as it is now.
   * One primary-key range read: with nothing new it touches no row.
   */
  async since(after: number, limit: number, upTo?: number): Promise<RouteChange[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      `SELECT c.id AS seq, c.replica_id, c.model AS changed_model,
              r.model AS replica_model, r.state, r.endpoint, r.reason,
              m.name AS model_name, ${modelRoutingColumns('m')}
         FROM route_changes c
         LEFT JOIN replicas r ON c.replica_id IS NOT NULL AND r.id = c.replica_id
         LEFT JOIN models m ON c.replica_id IS NULL AND m.name = c.model
        WHERE c.id > ? ${upTo === undefined ? '' : 'AND c.id <= ?'}
        ORDER BY c.id LIMIT ?`,
      upTo === undefined ? [after, limit] : [after, upTo, limit],
    );
    return rows.map((r): RouteChange => {
      const seq = Number(r.seq);
      if (r.replica_id !== null) {
        const gone = r.state === null || r.state === undefined;
        return {
          kind: 'replica',
          seq,
          id: String(r.replica_id),
          model: String(gone ? r.changed_model : r.replica_model),
          replica: gone ? null : { state: String(r.state), endpoint: r.endpoint ?? null, reason: r.reason ?? null },
        };
      }
      return {
        kind: 'model',
        seq,
        model: String(r.changed_model),
        routing: r.model_name === null || r.model_name === undefined ? null : modelRouting(r),
      };
    });
  }

  /** Deletes changes older than `ms` (a gateway whose cursor is older does a full read instead); returns how many. */
  async prune(ms: number): Promise<number> {
    const [r] = await this.pool.query<ResultSetHeader>(
      'DELETE FROM route_changes WHERE at < NOW(3) - INTERVAL ? MICROSECOND LIMIT 10000',
      [ms * 1000],
    );
    return r.affectedRows;
  }
}
