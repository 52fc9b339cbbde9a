/**
 * The cluster page's credentials (tables page_keys and page_sessions, migration 12): operator keys, kept only as
 * their SHA-256, and the sessions a browser gets for one (or for an operator certificate).
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Pool, ResultSetHeader, RowDataPacket } from 'mysql2/promise';

/** How long a page session lasts from sign-in, ms (a working day; signing in again is one paste). */
export const PAGE_SESSION_MS = 12 * 3600_000;
/** What every page key starts with, so one found in a log or a paste is recognisable. */
export const PAGE_KEY_PREFIX = 'llmgw-page-';

/** The SHA-256 of a secret, hex: what is stored instead of it (keys and cookies are 256 random bits). */
export function digestOf(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/** A signed-in browser's session, as a request is judged by it. */
export interface PageSession {
  operator: string;
  keyName: string | null;
  csrf: string;
  expiresAt: Date;
}

/** A page key as `llmgw ctl page-key list` shows it (never the key). */
export interface PageKeyRecord {
  name: string;
  createdAt: Date;
  revokedAt: Date | null;
}

/** Page keys and sessions over MySQL. */
export class PageAuthStore {
  constructor(private readonly pool: Pool) {}

  /** Creates the key NAME and returns it (the only time it is seen); a name already used is refused (null). */
  async createKey(name: string): Promise<string | null> {
    const key = `${PAGE_KEY_PREFIX}${randomBytes(32).toString('base64url')}`;
    const [r] = await this.pool.query<ResultSetHeader>(
      'INSERT IGNORE INTO page_keys (name, digest, created_at) VALUES (?, ?, NOW(3))',
      [name, digestOf(key)],
    );
    return r.affectedRows === 1 ? key : null;
  }

  /** The unrevoked key's name for a presented key, or null. */
  async keyName(key: string): Promise<string | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      'SELECT name FROM page_keys WHERE digest = ? AND revoked_at IS NULL',
      [digestOf(key)],
    );
    return (rows[0]?.name as string | undefined) ?? null;
  }

  /** Every key, newest first. */
  async listKeys(): Promise<PageKeyRecord[]> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      'SELECT name, created_at, revoked_at FROM page_keys ORDER BY created_at DESC',
    );
    return rows.map((r) => ({
      name: r.name,
      createdAt: new Date(r.created_at),
      revokedAt: r.revoked_at ? new Date(r.revoked_at) : null,
    }));
  }

  /** Revokes the key NAME and ends its sessions; false when no unrevoked key has that name. */
  async revokeKey(name: string): Promise<boolean> {
    const [r] = await this.pool.query<ResultSetHeader>(
      'UPDATE page_keys SET revoked_at = NOW(3) WHERE name = ? AND revoked_at IS NULL',
      [name],
    );
    await this.pool.query('DELETE FROM page_sessions WHERE key_name = ?', [name]);
    return r.affectedRows === 1;
  }

  /** Starts a session; returns the cookie value (only its digest is stored) and its CSRF token. */
  async createSession(o: { operator: string; keyName: string | null }): Promise<{ token: string } & PageSession> {
    const token = randomBytes(32).toString('base64url');
    const csrf = randomBytes(32).toString('base64url');
    const expiresAt = new Date(Date.now() + PAGE_SESSION_MS);
    await this.pool.query(
      `INSERT INTO page_sessions (digest, operator, key_name, csrf, created_at, expires_at) VALUES (?, ?, ?, ?, NOW(3), ?)`,
      [digestOf(token), o.operator.slice(0, 80), o.keyName, csrf, expiresAt],
    );
    // Expired sessions go as new ones come: no timer, and the table stays as small as the sign-ins of a day.
    await this.pool.query('DELETE FROM page_sessions WHERE expires_at < NOW(3)');
    return { token, operator: o.operator, keyName: o.keyName, csrf, expiresAt };
  }

  /** The live session of a cookie value, or null (unknown, expired, or its key revoked). */
  async session(token: string): Promise<PageSession | null> {
    const [rows] = await this.pool.query<RowDataPacket[]>(
      'SELECT operator, key_name, csrf, expires_at FROM page_sessions WHERE digest = ? AND expires_at > NOW(3)',
      [digestOf(token)],
    );
    const r = rows[0];
    return r ? { operator: r.operator, keyName: r.key_name, csrf: r.csrf, expiresAt: new Date(r.expires_at) } : null;
  }

  /** Ends a session (sign-out). */
  async endSession(token: string): Promise<void> {
    await this.pool.query('DELETE FROM page_sessions WHERE digest = ?', [digestOf(token)]);
  }
}
