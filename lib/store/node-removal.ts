/** Forgetting a removed node in MySQL: every row that names it, except the event log and its (revoked) certificates. */
import type { Pool, ResultSetHeader } from 'mysql2/promise';

/** The tables a node's rows are deleted from, and the column naming it. */
const NODE_ROWS = [
  ['host_keys', 'node_id'],
  ['weight_copies', 'node_id'],
  ['door_task_tokens', 'cn'],
  ['shards', 'node_id'],
  ['nodes', 'id'],
] as const;

/**
 * Deletes the node's rows (its host keys, weights copies, door task tokens, shards, and the node itself); returns how
 * many went from each table. The events stay (the history), and so do its certificates: revoked, the CRL lists them.
 */
export async function forgetNodeRows(pool: Pool, nodeId: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const [table, column] of NODE_ROWS) {
    const [r] = await pool.query<ResultSetHeader>(`DELETE FROM ${table} WHERE ${column} = ?`, [nodeId]);
    counts[table] = r.affectedRows;
  }
  return counts;
}
