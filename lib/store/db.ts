/** Opening the MySQL pool (over TLS when configured) and applying migrations, safely when several processes start at once. */
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import mysql from 'mysql2/promise';
import type { MysqlTls } from '../../config/types';
import { LlmgwError } from '../errors';
import { explainRefusals, translateMysqlError, type AccessContext } from './access';
import type { DbRole } from './grants';
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
  /** server.yaml's mysql.tls: verify the server by this CA (and present cert/key); null or absent: no TLS */
  tls?: MysqlTls | null;
  /** the role connecting, named by a refused statement's error (which `llmgw db grants ROLE` to run) */
  role?: DbRole;
}

/**
 * The SQL of a named lock's name scoped to the connection's database (one `?`: the lock's own name). MySQL's named
 * locks are server-wide, so under a bare name two clusters — or two test databases — on one server serialised each
 * other's placements and migrations. The database's MD5 keeps the name within MariaDB's 64 characters.
 */
export const DB_LOCK_NAME = "CONCAT(?, '/', MD5(IFNULL(DATABASE(), '')))";

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

/** Reads one PEM file named by mysql.tls; a missing one names the key and the fix. */
function readTlsFile(key: keyof MysqlTls, file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new LlmgwError(
      'LLMGW_CONFIG_INVALID',
      `mysql.tls.${key}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? String(err)}); give the path of a PEM file this process may read`,
      { key: `mysql.tls.${key}`, file },
    );
  }
}

/**
 * mysql2's options for TLS as mysql.tls says: the server's certificate verified by the CA and for the host (never
 * rejectUnauthorized: false). mysql2 checks the name it connects to, so for serverName it is told to connect to that
 * name while the socket goes to the real host.
 */
export function tlsOptions(tls: MysqlTls, host: string, port: number): Partial<mysql.PoolOptions> {
  const ssl = {
    ca: readTlsFile('ca', tls.ca),
    ...(tls.cert ? { cert: readTlsFile('cert', tls.cert) } : {}),
    ...(tls.key ? { key: readTlsFile('key', tls.key) } : {}),
    rejectUnauthorized: true,
    verifyIdentity: true,
  };
  if (!tls.serverName || tls.serverName === host) return { ssl };
  return { ssl, host: tls.serverName, stream: () => connect({ host, port }) };
}

/** Opens a pool on the database (creating it when missing) and brings its schema up to date, or checks it. */
export async function openDatabase(url: string, o: OpenDatabaseOptions = {}): Promise<mysql.Pool> {
  const { options, database } = parseMysqlUrl(url);
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? 3306;
  const context: AccessContext = {
    ...(o.role ? { role: o.role } : {}),
    user: options.user ?? 'root',
    host,
    port,
    database,
    tls: Boolean(o.tls),
  };
  const connectOptions = { ...options, ...(o.tls ? tlsOptions(o.tls, host, port) : {}) };
  const admin = await mysql.createConnection(connectOptions).catch((err: Error) => {
    const explained = translateMysqlError(err, context);
    if (explained !== err) throw explained;
    throw new Error(
      `cannot connect to MySQL at ${host}:${port} (${err.message}): is MariaDB running? check mysql.url in server.yaml`,
    );
  });
  try {
    // A role's user may not CREATE DATABASE, even IF NOT EXISTS: made only when this user cannot see it.
    const [found] = await admin.query<mysql.RowDataPacket[]>(
      'SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?',
      [database],
    );
    if (!found.length)
      await admin.query(`CREATE DATABASE IF NOT EXISTS \`${database.replace(/`/g, '')}\``).catch((err: unknown) => {
        throw translateMysqlError(err, context);
      });
  } finally {
    await admin.end();
  }
  const pool = explainRefusals(
    mysql.createPool({ ...connectOptions, database, connectionLimit: 8, timezone: 'Z', dateStrings: false }),
    context,
  );
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
export function openConfiguredDatabase(
  section: { url: string; autoMigrate?: boolean; tls?: MysqlTls | null },
  role?: DbRole,
): Promise<mysql.Pool> {
  return openDatabase(section.url, {
    migrate: section.autoMigrate !== false,
    tls: section.tls ?? null,
    ...(role ? { role } : {}),
  });
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
  // Up to date: nothing to lock or create, so a role's user (no DDL grants) starts with autoMigrate on too.
  const seen = await appliedVersions(pool);
  if (seen.size && !schemaState(seen).missing.length) {
    checkSchema(seen);
    return 0;
  }
  const conn = await pool.getConnection();
  try {
    const [lockRows] = await conn.query<mysql.RowDataPacket[]>(`SELECT GET_LOCK(${DB_LOCK_NAME}, 60) AS got`, [
      'llmgw_migrate',
    ]);
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
    await conn.query(`SELECT RELEASE_LOCK(${DB_LOCK_NAME})`, ['llmgw_migrate']).catch(() => undefined);
    conn.release();
  }
}
