/** Inference API keys in MySQL (migration 13): the keys' digests and scope, the per-minute quota leases, usage per hour. */
import type { Pool, ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import type { KeySpec } from '../api-keys';
import { LlmgwError } from '../errors';

/** A key as the gateway holds it: everything but the key itself. */
export interface KeyRecord {
  id: number;
  name: string;
  digest: string;
  /** null: every model */
  models: string[] | null;
  rpm: number | null;
  tpm: number | null;
  /** epoch ms; null: never */
  expiresAt: number | null;
  revoked: boolean;
}

/** A key as `ctl keys list` shows it. */
export interface KeyListEntry {
  name: string;
  prefix: string;
  models: string[] | null;
  rpm: number | null;
  tpm: number | null;
  expiresAt: string | null;
  createdAt: string;
  revokedAt: string | null;
}

/** One row of `ctl keys usage`: a key's use of a model in one hour (UTC). */
export interface KeyUsageRow {
  name: string;
  model: string;
  hour: string;
  requests: number;
  refused: number;
  promptTokens: number;
  completionTokens: number;
}

/** Usage counted by one gateway since its last flush, added to the hour's row. */
export interface UsageDelta {
  keyId: number;
  model: string;
  /** epoch ms of the hour's start */
  hour: number;
  requests: number;
  refused: number;
  promptTokens: number;
  completionTokens: number;
}

/** What a gateway asks of one key's budget for one minute. want: a slice ahead of need; need: the least that helps. */
export interface LeaseAsk {
  keyId: number;
  minute: number;
  rpm: number | null;
  tpm: number | null;
  wantRequests: number;
  needRequests: number;
  wantTokens: number;
  needTokens: number;
  /** tokens this gateway used past what it had leased (answers longer than estimated): charged first, unconditionally */
  debtTokens: number;
}

/** What a lease granted, and what is left of the minute's budget after it. */
export interface LeaseGrant {
  requests: number;
  tokens: number;
  requestsLeft: number;
  tokensLeft: number;
}

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
const json = <T>(v: unknown): T => (typeof v === 'string' ? (JSON.parse(v) as T) : (v as T));

/** How much to grant of one dimension: the slice wanted, or less near the limit (never less than needed, never past it). */
export function grantOf(limit: number | null, used: number, want: number, need: number): number {
  if (limit === null) return want;
  const left = limit - used;
  if (left < need || left <= 0) return 0;
  // Near the limit, hand out half of what is left (at least what is needed): the last of the budget is shared among
  // gateways in smaller pieces instead of one of them holding it all.
  return Math.min(left, Math.max(need, Math.min(want, Math.floor(left / 2))));
}

/** Reads and writes api_keys, key_quota and key_usage. */
export class KeyStore {
  constructor(readonly pool: Pool) {}

  /** Records a new key by its digest; a name already taken (revoked keys keep theirs) is refused. */
  async create(spec: KeySpec, digest: string, prefix: string): Promise<void> {
    try {
      await this.pool.query(
        `INSERT INTO api_keys (name, digest, prefix, models, rpm, tpm, expires_at, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, NOW(3), NOW(3))`,
        [
          spec.name,
          digest,
          prefix,
          spec.models ? JSON.stringify(spec.models) : null,
          spec.rpm,
          spec.tpm,
          spec.expiresAt,
        ],
      );
    } catch (err) {
      if ((err as { code?: string }).code === 'ER_DUP_ENTRY')
        throw new LlmgwError(
          'LLMGW_KEY_EXISTS',
          `a key named ${spec.name} exists already (revoked keys keep their names, so usage stays theirs): choose another name`,
          { name: spec.name },
        );
      throw err;
    }
  }

  /** Every key, oldest first. */
  async list(): Promise<KeyListEntry[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      'SELECT name, prefix, models, rpm, tpm, expires_at, created_at, revoked_at FROM api_keys ORDER BY id',
    );
    return rows.map((r) => ({
      name: String(r.name),
      prefix: String(r.prefix),
      models: json<string[] | null>(r.models),
      rpm: num(r.rpm),
      tpm: num(r.tpm),
      expiresAt: r.expires_at ? (r.expires_at as Date).toISOString() : null,
      createdAt: (r.created_at as Date).toISOString(),
      revokedAt: r.revoked_at ? (r.revoked_at as Date).toISOString() : null,
    }));
  }

  /** Revokes a key by name; false when it was revoked already. An unknown name is refused (LLMGW_UNKNOWN_KEY). */
  async revoke(name: string): Promise<boolean> {
    const [r] = await this.pool.query<ResultSetHeader>(
      'UPDATE api_keys SET revoked_at = NOW(3), updated_at = NOW(3) WHERE name = ? AND revoked_at IS NULL',
      [name],
    );
    if (r.affectedRows === 1) return true;
    await this.idOf(name);
    return false;
  }

  /** A key's id by name, or LLMGW_UNKNOWN_KEY. */
  async idOf(name: string): Promise<number> {
    const [rows] = await this.pool.query<RowDataPacket[]>('SELECT id FROM api_keys WHERE name = ?', [name]);
    if (!rows[0])
      throw new LlmgwError('LLMGW_UNKNOWN_KEY', `no key is named ${name}: see llmgw ctl keys list`, { name });
    return Number(rows[0].id);
  }

  /**
   * Keys changed at or after `since` (all keys when null), and the database's clock when read: the gateway asks
   * again from a little before that, so a change committed late with an earlier timestamp is not missed.
   */
  async changedSince(since: Date | null): Promise<{ keys: KeyRecord[]; now: Date }> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      `SELECT id, name, digest, models, rpm, tpm, expires_at, revoked_at, NOW(3) AS now FROM api_keys
       ${since ? 'WHERE updated_at >= ?' : ''}`,
      since ? [since] : [],
    );
    let now: Date | null = null;
    const keys = rows.map((r) => {
      now = r.now as Date;
      return {
        id: Number(r.id),
        name: String(r.name),
        digest: String(r.digest),
        models: json<string[] | null>(r.models),
        rpm: num(r.rpm),
        tpm: num(r.tpm),
        expiresAt: r.expires_at ? (r.expires_at as Date).getTime() : null,
        revoked: r.revoked_at !== null,
      };
    });
    if (!now) {
      const [t] = await this.pool.query<RowDataPacket[]>('SELECT NOW(3) AS now');
      now = t[0]!.now as Date;
    }
    return { keys, now };
  }

  /**
   * Leases part of a key's budget for one minute, atomically (a row lock): the debt first, then what fits under
   * the limits. The sum of all gateways' leases never passes a limit except by debts, which are tokens already spent.
   */
  async lease(a: LeaseAsk): Promise<LeaseGrant> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.leaseOnce(a);
      } catch (err) {
        // Two gateways leasing the same key's first slice of a minute may deadlock on the new row; one is rolled back.
        if ((err as { code?: string }).code !== 'ER_LOCK_DEADLOCK' || attempt >= 3) throw err;
      }
    }
  }

  private async leaseOnce(a: LeaseAsk): Promise<LeaseGrant> {
    const conn = await this.pool.getConnection();
    try {
      await conn.beginTransaction();
      // An upsert, not INSERT IGNORE: it takes the row's exclusive lock at once (INSERT IGNORE's shared lock, then
      // FOR UPDATE's exclusive one, deadlocks two gateways leasing at the same moment).
      await conn.query('INSERT INTO key_quota (key_id, minute) VALUES (?, ?) ON DUPLICATE KEY UPDATE key_id = key_id', [
        a.keyId,
        a.minute,
      ]);
      const [rows] = await conn.query<RowDataPacket[]>(
        'SELECT requests, tokens FROM key_quota WHERE key_id = ? AND minute = ? FOR UPDATE',
        [a.keyId, a.minute],
      );
      const usedR = Number(rows[0]?.requests ?? 0);
      const usedT = Number(rows[0]?.tokens ?? 0) + a.debtTokens;
      const requests = a.wantRequests + a.needRequests > 0 ? grantOf(a.rpm, usedR, a.wantRequests, a.needRequests) : 0;
      const tokens = a.wantTokens + a.needTokens > 0 ? grantOf(a.tpm, usedT, a.wantTokens, a.needTokens) : 0;
      await conn.query(
        'UPDATE key_quota SET requests = requests + ?, tokens = tokens + ? WHERE key_id = ? AND minute = ?',
        [requests, a.debtTokens + tokens, a.keyId, a.minute],
      );
      await conn.commit();
      return {
        requests,
        tokens,
        requestsLeft: a.rpm === null ? Infinity : a.rpm - usedR - requests,
        tokensLeft: a.tpm === null ? Infinity : a.tpm - usedT - tokens,
      };
    } catch (err) {
      await conn.rollback().catch(() => undefined);
      throw err;
    } finally {
      conn.release();
    }
  }

  /** Adds tokens spent past a lease to a minute's count (an answer that finished after its minute ended). */
  async charge(keyId: number, minute: number, tokens: number): Promise<void> {
    await this.pool.query(
      `INSERT INTO key_quota (key_id, minute, tokens) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE tokens = tokens + VALUES(tokens)`,
      [keyId, minute, tokens],
    );
  }

  /** What all gateways leased of a key for a minute (tests and `ctl keys usage` read it). */
  async window(keyId: number, minute: number): Promise<{ requests: number; tokens: number }> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      'SELECT requests, tokens FROM key_quota WHERE key_id = ? AND minute = ?',
      [keyId, minute],
    );
    return { requests: Number(rows[0]?.requests ?? 0), tokens: Number(rows[0]?.tokens ?? 0) };
  }

  /** Forgets quota rows of minutes before `minute` (they only matter while their minute runs). */
  async pruneQuota(minute: number): Promise<number> {
    const [r] = await this.pool.query<ResultSetHeader>('DELETE FROM key_quota WHERE minute < ?', [minute]);
    return r.affectedRows;
  }

  /** Adds a batch of usage deltas in one statement. */
  async addUsage(deltas: UsageDelta[]): Promise<void> {
    if (deltas.length === 0) return;
    await this.pool.query(
      `INSERT INTO key_usage (key_id, model, hour, requests, refused, prompt_tokens, completion_tokens) VALUES ?
       ON DUPLICATE KEY UPDATE requests = requests + VALUES(requests), refused = refused + VALUES(refused),
         prompt_tokens = prompt_tokens + VALUES(prompt_tokens), completion_tokens = completion_tokens + VALUES(completion_tokens)`,
      [
        deltas.map((d) => [
          d.keyId,
          d.model,
          new Date(d.hour),
          d.requests,
          d.refused,
          d.promptTokens,
          d.completionTokens,
        ]),
      ],
    );
  }

  /** Usage rows of the last `hours` hours, newest first; of one key when named (an unknown name is refused). */
  async usage(name: string | undefined, hours = 24): Promise<KeyUsageRow[]> {
    if (name !== undefined) await this.idOf(name);
    const [rows] = await this.pool.query<RowDataPacket[]>(
      `SELECT k.name, u.model, u.hour, u.requests, u.refused, u.prompt_tokens, u.completion_tokens
       FROM key_usage u JOIN api_keys k ON k.id = u.key_id
       WHERE u.hour >= UTC_TIMESTAMP() - INTERVAL ? HOUR ${name !== undefined ? 'AND k.name = ?' : ''}
       ORDER BY u.hour DESC, k.name, u.model`,
      name !== undefined ? [hours, name] : [hours],
    );
    return rows.map((r) => ({
      name: String(r.name),
      model: String(r.model),
      hour: (r.hour as Date).toISOString(),
      requests: Number(r.requests),
      refused: Number(r.refused),
      promptTokens: Number(r.prompt_tokens),
      completionTokens: Number(r.completion_tokens),
    }));
  }
}
