/**
 * What a stopping replica and a drain read, and the gateways write (table gateway_inflight, migration 9): each
 * gateway's routed replicas and requests in flight, and when a replica left or joined routing.
 */
import type { Pool, ResultSetHeader, RowDataPacket } from 'mysql2/promise';

/** How often a gateway that has nothing in flight and nothing new to say still writes its row (its heartbeat). */
export const GATEWAY_HEARTBEAT_MS = 2000;
/** A gateway whose row is older than this stopped reporting (it crashed, or lost MySQL): it no longer counts. */
export const GATEWAY_LIVE_MS = 5000;

/** One gateway's report: the replicas its routing table holds now, and its requests in flight per replica (> 0 only). */
export interface GatewayReport {
  routed: string[];
  inflight: Record<string, number>;
}

/** A live gateway's last report. */
export interface LiveReport extends GatewayReport {
  gatewayId: string;
  /** how old the row is, by MySQL's clock */
  ageMs: number;
}

/** Who still holds a replica: the requests in flight on it, and the live gateways that route it or have one on it. */
export interface Holders {
  inFlight: number;
  gateways: string[];
}

const json = <T>(v: unknown): T => (typeof v === 'string' ? (JSON.parse(v) as T) : (v as T));

/** The requests in flight on `replicaId` through live gateways, and which gateways still route it or carry one. */
export function holdersOf(reports: LiveReport[], replicaId: string): Holders {
  let inFlight = 0;
  const gateways: string[] = [];
  for (const r of reports) {
    const n = r.inflight[replicaId] ?? 0;
    inFlight += n;
    if (n > 0 || r.routed.includes(replicaId)) gateways.push(r.gatewayId);
  }
  return { inFlight, gateways };
}

/** One live gateway's view of a model's ready replicas: those it does not route yet (empty: it routes them all). */
export interface GatewayLag {
  gatewayId: string;
  /** how old its last report is, by MySQL's clock */
  ageMs: number;
  missing: string[];
}

/** For each live gateway, which of `ready` its last report does not route. */
export function lagsOf(reports: LiveReport[], ready: string[]): GatewayLag[] {
  return reports.map((r) => {
    const routed = new Set(r.routed);
    return { gatewayId: r.gatewayId, ageMs: r.ageMs, missing: ready.filter((id) => !routed.has(id)) };
  });
}

/** Reads and writes gateway_inflight, and the times a drain measures. Every time is MySQL's (NOW(3)), never a host's. */
export class DrainStore {
  constructor(readonly pool: Pool) {}

  /** Writes one gateway's report (one statement): its row is its heartbeat. */
  async report(gatewayId: string, r: GatewayReport): Promise<void> {
    await this.pool.query(
      `INSERT INTO gateway_inflight (gateway_id, routed, inflight, started_at, updated_at) VALUES (?, ?, ?, NOW(3), NOW(3))
       ON DUPLICATE KEY UPDATE routed = VALUES(routed), inflight = VALUES(inflight), updated_at = NOW(3)`,
      [gatewayId, JSON.stringify(r.routed), JSON.stringify(r.inflight)],
    );
  }

  /** Removes a gateway's row (it is closing: nothing of it is in flight any more). */
  async forget(gatewayId: string): Promise<void> {
    await this.pool.query('DELETE FROM gateway_inflight WHERE gateway_id = ?', [gatewayId]);
  }

  /** Removes rows of gateways silent for longer than `ms` (processes long gone); returns how many. */
  async pruneGateways(ms: number): Promise<number> {
    const [r] = await this.pool.query<ResultSetHeader>(
      'DELETE FROM gateway_inflight WHERE updated_at < NOW(3) - INTERVAL ? MICROSECOND',
      [ms * 1000],
    );
    return r.affectedRows;
  }

  /** The reports of gateways heard from within GATEWAY_LIVE_MS, by id. */
  async liveReports(): Promise<LiveReport[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      `SELECT gateway_id, routed, inflight, TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(3)) AS age_us FROM gateway_inflight
       WHERE updated_at > NOW(3) - INTERVAL ? MICROSECOND ORDER BY gateway_id`,
      [GATEWAY_LIVE_MS * 1000],
    );
    return rows.map((r) => ({
      gatewayId: String(r.gateway_id),
      routed: json<string[]>(r.routed),
      inflight: json<Record<string, number>>(r.inflight),
      ageMs: Number(r.age_us) / 1000,
    }));
  }

  /** How long ago the replica recorded `stopping` (left routing), or null when it is not stopping. */
  async stoppingForMs(replicaId: string): Promise<number | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      `SELECT TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(3)) AS us FROM replicas WHERE id = ? AND state = 'stopping'`,
      [replicaId],
    );
    return rows[0] ? Number(rows[0].us) / 1000 : null;
  }

  /** When the replica became ready (its row's time: written in the same statement as the state), or null when it is not ready. */
  async readySince(replicaId: string): Promise<Date | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      `SELECT updated_at FROM replicas WHERE id = ? AND state = 'ready'`,
      [replicaId],
    );
    return rows[0] ? new Date(rows[0].updated_at as Date) : null;
  }

  /** When the event `kind` (e.g. replica.stopping) was last logged for a replica, or null. */
  async lastEventAt(replicaId: string, kind: string): Promise<Date | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      'SELECT MAX(at) AS at FROM events WHERE replica_id = ? AND kind = ?',
      [replicaId, kind],
    );
    return rows[0]?.at ? new Date(rows[0].at as Date) : null;
  }
}
