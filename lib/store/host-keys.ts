/** The ssh host keys onboarding learned (migration 5), and the registration and engine probe onboarding waits for. */
import type { Pool, ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import type { HostKey } from '../ssh/host-key';
import type { EngineStatus } from '../types';

export interface StoredHostKey extends HostKey {
  /** the address it was learned at */
  address: string;
  learnedAt: Date;
}

/** Reads and writes the host_keys table. */
export class HostKeyStore {
  constructor(readonly pool: Pool) {}

  /** Every key a node is known by, oldest first. */
  async list(nodeId: string): Promise<StoredHostKey[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      'SELECT fingerprint, key_type, public_key, address, learned_at FROM host_keys WHERE node_id = ? ORDER BY learned_at, fingerprint',
      [nodeId],
    );
    return rows.map((r) => ({
      fingerprint: String(r.fingerprint),
      type: String(r.key_type),
      key: String(r.public_key),
      address: String(r.address),
      learnedAt: r.learned_at as Date,
    }));
  }

  /** Records a key learned for a node (a second learning of the same key changes nothing); true when new. */
  async learn(nodeId: string, key: HostKey, address: string): Promise<boolean> {
    const [r] = await this.pool.query<ResultSetHeader>(
      'INSERT IGNORE INTO host_keys (node_id, fingerprint, key_type, public_key, address, learned_at) VALUES (?, ?, ?, ?, ?, NOW(3))',
      [nodeId, key.fingerprint, key.type, key.key, address],
    );
    return r.affectedRows === 1;
  }

  /** Forgets every key of a node (it was rebuilt on purpose); returns how many. */
  async forget(nodeId: string): Promise<number> {
    const [r] = await this.pool.query<ResultSetHeader>('DELETE FROM host_keys WHERE node_id = ?', [nodeId]);
    return r.affectedRows;
  }

  /** The database's clock (registration times are written by it, so waits compare against it). */
  async now(): Promise<Date> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT NOW(3) AS now');
    return rows[0]!.now as Date;
  }

  /** When the node last registered (its agent's start) and was last seen, or null when it never registered. */
  async registration(nodeId: string): Promise<{ registeredAt: Date; lastSeen: Date | null } | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT registered_at, last_seen FROM nodes WHERE id = ?', [
      nodeId,
    ]);
    const r = rows[0];
    return r ? { registeredAt: r.registered_at as Date, lastSeen: (r.last_seen as Date | null) ?? null } : null;
  }

  /** The node's last engine install and probe (each engine's status) and when it was recorded, or null before any. */
  async engineProbe(nodeId: string): Promise<{ checkedAt: Date; statuses: EngineStatus[] } | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      'SELECT engines_checked_at, engine_status FROM nodes WHERE id = ?',
      [nodeId],
    );
    const r = rows[0];
    if (!r?.engines_checked_at) return null;
    const statuses =
      typeof r.engine_status === 'string'
        ? (JSON.parse(r.engine_status) as EngineStatus[])
        : ((r.engine_status as EngineStatus[] | null) ?? []);
    return { checkedAt: r.engines_checked_at as Date, statuses };
  }
}
