/**
 * Table model_minute_stats (migration 14): each gateway's request counts and TTFT histogram per model per UTC
 * minute, written by the gateways' stats reporter and summed over gateways for the cluster page.
 */
import type { Pool, ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import { TTFT_BUCKETS_MS } from '../stats/ttft';

/** How long rows are kept: the page shows one hour; the second is slack for late and slow readers. */
export const MODEL_STATS_KEEP_MS = 2 * 3600_000;

/** One model's counts in one minute (the minute's start, ms since the epoch, UTC). */
export interface ModelMinute {
  minute: number;
  model: string;
  requests: number;
  errors5xx: number;
  errors4xx: number;
  /** one count per TTFT_BUCKETS_MS bound, then +Inf */
  ttft: ArrayLike<number>;
}

/** The histogram's columns, in TTFT_BUCKETS_MS order then +Inf: the migration spells them out the same way. */
export const TTFT_COLUMNS: readonly string[] = [...TTFT_BUCKETS_MS.map((b) => `ttft_le_${b}`), 'ttft_inf'];

const COUNT_COLUMNS = ['requests', 'errors_5xx', 'errors_4xx', ...TTFT_COLUMNS];

/** Reads and writes model_minute_stats. */
export class ModelStatsStore {
  constructor(readonly pool: Pool) {}

  /**
   * Writes a gateway's rows in one statement: each replaces that gateway's counts for its minute and model
   * (they are cumulative), so writing the same row again, or a retry, never counts twice.
   */
  async write(gatewayId: string, rows: readonly ModelMinute[]): Promise<void> {
    if (!rows.length) return;
    const cols = ['minute', 'model', 'gateway_id', ...COUNT_COLUMNS, 'updated_at'];
    const values: unknown[] = [];
    const tuples = rows.map((r) => {
      values.push(new Date(r.minute), r.model, gatewayId, r.requests, r.errors5xx, r.errors4xx, ...Array.from(r.ttft));
      return `(${cols.map((c) => (c === 'updated_at' ? 'NOW(3)' : '?')).join(', ')})`;
    });
    await this.pool.query(
      `INSERT INTO model_minute_stats (${cols.join(', ')}) VALUES ${tuples.join(', ')}
       ON DUPLICATE KEY UPDATE ${[...COUNT_COLUMNS, 'updated_at'].map((c) => `${c} = VALUES(${c})`).join(', ')}`,
      values,
    );
  }

  /** Deletes rows older than `keepMs` (default two hours) by MySQL's clock; returns how many. */
  async prune(keepMs = MODEL_STATS_KEEP_MS): Promise<number> {
    const [r] = await this.pool.query<ResultSetHeader>(
      'DELETE FROM model_minute_stats WHERE minute < UTC_TIMESTAMP() - INTERVAL ? SECOND',
      [Math.round(keepMs / 1000)],
    );
    return r.affectedRows;
  }

  /** Every model's counts per minute over the last `minutes` minutes (the current one included), summed over gateways, oldest first. */
  async recent(minutes = 60): Promise<ModelMinute[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      `SELECT minute, model, ${COUNT_COLUMNS.map((c) => `SUM(${c}) AS ${c}`).join(', ')}
       FROM model_minute_stats
       WHERE minute > UTC_TIMESTAMP() - INTERVAL ? MINUTE
       GROUP BY minute, model ORDER BY minute, model`,
      [minutes],
    );
    return rows.map((r) => ({
      minute: (r.minute as Date).getTime(), // the pool reads DATETIME as UTC
      model: String(r.model),
      requests: Number(r.requests),
      errors5xx: Number(r.errors_5xx),
      errors4xx: Number(r.errors_4xx),
      ttft: TTFT_COLUMNS.map((c) => Number(r[c])),
    }));
  }
}
