/** Which nodes hold which whole weights files (table weight_copies, migration 6): a hint for peer fetches. */
import type { Pool, RowDataPacket } from 'mysql2/promise';

/** One whole file on one node, as its agent reports it. */
export interface WeightCopyReport {
  key: string;
  url: string;
  size: number;
  sha256: string;
  verified: boolean;
  storedAt: string;
}

/** A copy as the control plane knows it. */
export interface WeightCopy extends WeightCopyReport {
  nodeId: string;
  /** the node's weights endpoint */
  endpoint: string;
  reportedAt: string;
}

/** A node counts as a peer while seen this recently and not down (its agent heartbeats every 2 s). */
const PEER_SEEN_MS = 30_000;

const toCopy = (r: RowDataPacket): WeightCopy => ({
  nodeId: String(r.node_id),
  key: String(r.weight_key),
  url: String(r.url),
  size: Number(r.size),
  sha256: String(r.sha256),
  verified: Boolean(r.verified),
  endpoint: String(r.endpoint),
  storedAt: new Date(r.stored_at).toISOString(),
  reportedAt: new Date(r.reported_at).toISOString(),
});

/** Reads and writes weight_copies. */
export class WeightsStore {
  constructor(readonly pool: Pool) {}

  /**
   * Records what `nodeId` holds, reachable at `endpoint`. `replace`: this is all of it (the agent's report at
   * start), so rows for files it no longer has go; otherwise the files are added.
   */
  async report(nodeId: string, endpoint: string, files: WeightCopyReport[], replace: boolean): Promise<void> {
    const conn = await this.pool.getConnection();
    try {
      await conn.beginTransaction();
      if (replace) await conn.query('DELETE FROM weight_copies WHERE node_id = ?', [nodeId]);
      // The endpoint is the node's, not the file's: a new one (agent restarted elsewhere) applies to every row.
      else await conn.query('UPDATE weight_copies SET endpoint = ? WHERE node_id = ?', [endpoint, nodeId]);
      for (const f of files) {
        await conn.query(
          `INSERT INTO weight_copies (node_id, weight_key, url, size, sha256, verified, endpoint, stored_at, reported_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NOW(3))
           ON DUPLICATE KEY UPDATE url = VALUES(url), size = VALUES(size), sha256 = VALUES(sha256), verified = VALUES(verified),
             endpoint = VALUES(endpoint), stored_at = VALUES(stored_at), reported_at = NOW(3)`,
          [nodeId, f.key, f.url, f.size, f.sha256, f.verified ? 1 : 0, endpoint, new Date(f.storedAt)],
        );
      }
      await conn.commit();
    } catch (err) {
      await conn.rollback().catch(() => undefined);
      throw err;
    } finally {
      conn.release();
    }
  }

  /** Nodes other than `exceptNode` that hold `key` and are up (seen lately, not down). */
  async peersFor(key: string, exceptNode: string): Promise<WeightCopy[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      `SELECT c.* FROM weight_copies c JOIN nodes n ON n.id = c.node_id
       WHERE c.weight_key = ? AND c.node_id <> ? AND n.state <> 'down' AND n.last_seen > NOW(3) - INTERVAL ? MICROSECOND
       ORDER BY c.node_id`,
      [key, exceptNode, PEER_SEEN_MS * 1000],
    );
    return rows.map(toCopy);
  }

  /** Every copy, by node then key. */
  async list(): Promise<WeightCopy[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT * FROM weight_copies ORDER BY node_id, weight_key');
    return rows.map(toCopy);
  }
}
