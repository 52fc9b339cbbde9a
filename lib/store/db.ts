/** Opening the MySQL pool and applying migrations, safely when several processes start at once. */
import mysql from 'mysql2/promise';
import { LlmgwError } from '../errors';
import { MIGRATIONS } from './migrations';

/** The schema version this llmgw is built for: its newest migration. */
export const SCHEMA_VERSION = Math.max(...MIGRATIONS.map((m) => m.version));

/** Options of openDatabase. */
export interface OpenDatabaseOptions {
  /**
   * true (default): bring the schema up to date. false: only check it (server.yaml's mysql.autoMigrate: false), and
   * refuse a schema behind this llmgw's, naming `llmgw db migrate`. A schema ahead is refused either way.
   */
  migrate?: boolean;
  /** false with migrate: false: neither migrate nor check (`llmgw db status` shows a schema whatever it is) */
  check?: boolean;
}

/** Splits a mysql:// URL into connection options and the database name. */
export function parseMysqlUrl(url: string): { options: mysql.PoolOptions; database: string } {
  const u = new URL(url);
  const database = decodeURIComponent(u.pathname.replace(/^\//, ''));
  if (u.protocol !== 'mysql:' || !database)
    throw new Error(`mysql url "${url}" must look like mysql://user:pass@host:3306/database`);
  return {
    database,
    options: {
      host: u.hostname,
      port: Number(u.port || 3306),
      user: decodeURIComponent(u.username || 'root'),
      password: decodeURIComponent(u.password),
    },
  };
}

/** Opens a pool on the database (creating it when missing) and brings its schema up to date, or checks it. */
export async function openDatabase(url: string, o: OpenDatabaseOptions = {}): Promise<mysql.Pool> {
  const { options, database } = parseMysqlUrl(url);
  const admin = await mysql.createConnection(options).catch((err: Error) => {
    throw new Error(
      `cannot connect to MySQL at ${options.host}:${options.port} (${err.message}): is MariaDB running? check mysql.url in server.yaml`,
    );
  });
  try {
    await admin.query(`CREATE DATABASE IF NOT EXISTS \`${database.replace(/`/g, '')}\``);
  } finally {
    await admin.end();
  }
  const pool = mysql.createPool({ ...options, database, connectionLimit: 8, timezone: 'Z', dateStrings: false });
  try {
    if (o.migrate ?? true) await migrate(pool);
    else if (o.check ?? true) checkSchema(await appliedVersions(pool));
  } catch (err) {
    await pool.end().catch(() => undefined);
    throw err;
  }
  return pool;
}

/** Opens server.yaml's database as every role and command does: migrating unless `mysql.autoMigrate` is false. */
export function openConfiguredDatabase(section: { url: string; autoMigrate?: boolean }): Promise<mysql.Pool> {
  return openDatabase(section.url, { migrate: section.autoMigrate !== false });
}

/** The migrations applied to the database (none when it was never migrated). */
export async function appliedVersions(pool: mysql.Pool | mysql.PoolConnection): Promise<Set<number>> {
  try {
    const [rows] = await pool.query<mysql.RowDataPacket[]>('SELECT version FROM schema_migrations');
    return new Set(rows.map((r) => Number(r.version)));
  } catch (err) {
    if ((err as { code?: string }).code === 'ER_NO_SUCH_TABLE') return new Set();
    throw err;
  }
}

/** The schema against this llmgw's migrations: what is missing, and what it does not know. */
export function schemaState(applied: Set<number>): { missing: number[]; unknown: number[]; current: number } {
  const known = new Set(MIGRATIONS.map((m) => m.version));
  return {
    missing: MIGRATIONS.map((m) => m.version).filter((v) => !applied.has(v)),
    unknown: [...applied].filter((v) => !known.has(v)).sort((a, b) => a - b),
    current: applied.size ? Math.max(...applied) : 0,
  };
}

/** Throws LLMGW_SCHEMA_AHEAD for migrations this llmgw does not know, LLMGW_SCHEMA_BEHIND for missing ones. */
export function checkSchema(applied: Set<number>, o: { behindIsError?: boolean } = {}): void {
  const s = schemaState(applied);
  if (s.unknown.length)
    throw new LlmgwError(
      'LLMGW_SCHEMA_AHEAD',
      `the database's schema is at version ${s.current}, newer than this llmgw's ${SCHEMA_VERSION} (migrations ${s.unknown.join(', ')} are unknown here): a newer llmgw migrated it; upgrade llmgw on this host (llmgw db status shows both versions)`,
      { schema: s.current, binary: SCHEMA_VERSION },
    );
  if ((o.behindIsError ?? true) && s.missing.length)
    throw new LlmgwError(
      'LLMGW_SCHEMA_BEHIND',
      `the database's schema is at version ${s.current}, older than this llmgw's ${SCHEMA_VERSION} (missing migrations ${s.missing.join(', ')}), and mysql.autoMigrate is false: run llmgw db migrate --config FILE once, then start this again`,
      { schema: s.current, binary: SCHEMA_VERSION },
    );
}

/** Applies pending migrations under a named lock so two processes never apply the same one. */
export async function migrate(pool: mysql.Pool): Promise<number> {
  const conn = await pool.getConnection();
  try {
    const [lockRows] = await conn.query<mysql.RowDataPacket[]>(`SELECT GET_LOCK('llmgw_migrate', 60) AS got`);
    if (lockRows[0]?.got !== 1)
      throw new Error('timed out waiting for the migration lock held by another llmgw process');
    await conn.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version INT PRIMARY KEY, name VARCHAR(200) NOT NULL, applied_at DATETIME(3) NOT NULL)`);
    const applied = await appliedVersions(conn);
    // An older llmgw never migrates (nor runs on) a schema a newer one made.
    checkSchema(applied, { behindIsError: false });
    let count = 0;
    for (const m of MIGRATIONS) {
      if (applied.has(m.version)) continue;
      for (const sql of m.statements) await conn.query(sql);
      await conn.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, NOW(3))', [
        m.version,
        m.name,
      ]);
      count++;
    }
    return count;
  } finally {
    await conn.query(`SELECT RELEASE_LOCK('llmgw_migrate')`).catch(() => undefined);
    conn.release();
  }
}
