/** Opening the MySQL pool and applying migrations, safely when several processes start at once. */
import mysql from 'mysql2/promise';
import { MIGRATIONS } from './migrations';

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

/** Opens a pool on the database (creating it when missing) and brings its schema up to date. */
export async function openDatabase(url: string): Promise<mysql.Pool> {
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
  await migrate(pool);
  return pool;
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
    const [rows] = await conn.query<mysql.RowDataPacket[]>('SELECT version FROM schema_migrations');
    const applied = new Set(rows.map((r) => Number(r.version)));
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
