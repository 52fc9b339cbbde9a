/**
 * MySQL's refusals as llmgw errors: a denied statement names the table, the privilege and `llmgw db grants ROLE`;
 * a refused login, a failed TLS handshake and a server that wants TLS each name their fix.
 */
import type { Pool, PoolConnection } from 'mysql2/promise';
import { LlmgwError } from '../errors';
import { roleHas, type DbRole } from './grants';

/** Who is connecting where: what a translated error names. */
export interface AccessContext {
  role?: DbRole;
  user: string;
  host: string;
  port: number;
  database: string;
  /** whether server.yaml's mysql.tls is set */
  tls: boolean;
}

type MysqlError = Error & { code?: string; errno?: number };

const DDL = new Set(['CREATE', 'ALTER', 'DROP', 'INDEX', 'REFERENCES']);

/** Node's and OpenSSL's codes for a server certificate not trusted, not for this name, or out of date. */
const CERT_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_SIGNATURE_FAILURE',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'HANDSHAKE_NO_SSL_SUPPORT',
  // mysql2's wrapper of any failure of its TLS upgrade; the message is node's
  'HANDSHAKE_SSL_ERROR',
  'ERR_SSL_WRONG_VERSION_NUMBER',
  'ERR_SSL_TLSV1_ALERT_UNKNOWN_CA',
  'ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE',
  'ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE',
]);

const grantsCommand = (c: AccessContext, role: string = c.role ?? 'ROLE'): string =>
  `llmgw db grants ${role} --user ${c.user} --database ${c.database}`;

const roleWords = (c: AccessContext): string =>
  c.role ? `the ${c.role} role` : 'this process (its role: controlPlane, gateway or caWorker)';

/** A denied statement, in MySQL's words, as privilege and table (or null when the message is not one). */
export function parseDenial(message: string): { privilege: string; table: string | null; column?: string } | null {
  // "INSERT command denied to user 'u'@'h' for table `db`.`t`" (MariaDB) or "... for table 't'" (MySQL 8);
  // "UPDATE command denied to user 'u'@'h' for column 'c' in table 't'".
  const m = /^(\w+) command denied to user .+? for (?:column [`']?([^`']+)[`']? in )?table (.+)$/.exec(message);
  if (!m) return null;
  const table = (m[3] ?? '').replace(/[`']/g, '').split('.').pop() ?? '';
  return { privilege: (m[1] ?? '').toUpperCase(), table, ...(m[2] ? { column: m[2] } : {}) };
}

/** MySQL's refusal as an llmgw error naming the fix; any other error is returned as it is. */
export function translateMysqlError(err: unknown, c: AccessContext): unknown {
  // Not instanceof Error: node's TLS errors come from another realm under Jest.
  const e = err as MysqlError;
  if (typeof err !== 'object' || err === null || e.code === undefined || typeof e.message !== 'string') return err;
  const code = String(e.code);
  const where = `${c.host}:${c.port}`;
  if (code === 'ER_TABLEACCESS_DENIED_ERROR' || code === 'ER_COLUMNACCESS_DENIED_ERROR') {
    const d = parseDenial(e.message);
    if (d?.table) return grantMissing(e, c, d.privilege, d.table, d.column);
  }
  if (code === 'ER_DBACCESS_DENIED_ERROR')
    return new LlmgwError(
      'LLMGW_MYSQL_GRANT_MISSING',
      `MySQL user ${c.user} has no privileges on database ${c.database} at ${where} (${code}: ${e.message}): ${roleWords(c)} needs its grants; print them with ${grantsCommand(c)} and run them as a MySQL admin (after llmgw db migrate has made the tables). A missing database is made by llmgw db migrate`,
      { mysqlCode: code, user: c.user, database: c.database, role: c.role ?? null },
    );
  if (code === 'ER_SPECIFIC_ACCESS_DENIED_ERROR' || code === 'ER_PROCACCESS_DENIED_ERROR')
    return new LlmgwError(
      'LLMGW_MYSQL_GRANT_MISSING',
      `MySQL refused user ${c.user} at ${where}: ${e.message} (${code}); llmgw's roles need only the grants ${grantsCommand(c)} prints`,
      { mysqlCode: code, user: c.user, database: c.database, role: c.role ?? null },
    );
  if (code === 'ER_SECURE_TRANSPORT_REQUIRED' || /insecure transport/i.test(e.message))
    return new LlmgwError(
      'LLMGW_MYSQL_TLS_REQUIRED',
      `MySQL at ${where} accepts TLS connections only (${code}: ${e.message}), and server.yaml's mysql.tls is not set: add mysql.tls: { ca: /path/to/the MySQL server's CA certificate } (cert and key too if the user must present one; serverName when the server's certificate names another host)`,
      { mysqlCode: code, host: c.host, port: c.port },
    );
  if (code === 'ER_ACCESS_DENIED_ERROR' || code === 'ER_ACCESS_DENIED_NO_PASSWORD_ERROR')
    return new LlmgwError(
      'LLMGW_MYSQL_LOGIN_REFUSED',
      `MySQL at ${where} refused the login of user ${c.user} (${code}: ${e.message}): check the user and password in server.yaml's mysql.url; a new user is made by the statements ${grantsCommand(c)} prints${
        c.tls
          ? ''
          : ". If the server accepts TLS connections only, set mysql.tls: { ca: FILE } (MariaDB's require_secure_transport and a user REQUIRE SSL refuse a plain login this way)"
      }`,
      { mysqlCode: code, user: c.user, host: c.host, port: c.port },
    );
  if (CERT_CODES.has(code) || (c.tls && /^ERR_SSL_|^ERR_TLS_/.test(code)))
    return new LlmgwError(
      'LLMGW_MYSQL_TLS_FAILED',
      code === 'HANDSHAKE_NO_SSL_SUPPORT'
        ? `MySQL at ${where} does not offer TLS, and server.yaml's mysql.tls asks for it: give the server ssl-ca, ssl-cert and ssl-key (docs/operations.md, "MySQL users and TLS"), or remove mysql.tls where the network is trusted`
        : `TLS to MySQL at ${where} failed (${code}: ${e.message}): mysql.tls.ca must be the CA that signed the server's certificate, and that certificate must name the host llmgw connects to (${c.host}), or set mysql.tls.serverName to a name it holds`,
      { mysqlCode: code, host: c.host, port: c.port },
    );
  return err;
}

function grantMissing(e: MysqlError, c: AccessContext, privilege: string, table: string, column?: string): LlmgwError {
  const what = `${privilege} on table ${c.database}.${table}${column ? ` (column ${column})` : ''}`;
  const context = { mysqlCode: e.code, user: c.user, database: c.database, table, privilege, role: c.role ?? null };
  const head = `MySQL user ${c.user} lacks ${what} (${e.code})`;
  if (DDL.has(privilege) && c.role !== 'migrate')
    return new LlmgwError(
      'LLMGW_MYSQL_GRANT_MISSING',
      `${head}: a role's user changes no schema. Migrate as the migrate user (its grants: ${grantsCommand(c, 'migrate')}), with llmgw db migrate --config FILE whose mysql.url names that user, and set mysql.autoMigrate: false in this role's server.yaml`,
      context,
    );
  if (c.role && !roleHas(c.role, table, privilege))
    return new LlmgwError(
      'LLMGW_MYSQL_GRANT_MISSING',
      `${head}, which ${roleWords(c)} used, though llmgw db grants ${c.role} does not print it: a bug in llmgw's grants (lib/store/grants.ts), please report it; meanwhile grant it by hand: GRANT ${privilege} ON \`${c.database}\`.\`${table}\` TO '${c.user}'@'HOST'`,
      context,
    );
  return new LlmgwError(
    'LLMGW_MYSQL_GRANT_MISSING',
    `${head}, which ${roleWords(c)} needs: print its grants with ${grantsCommand(c)} (add --host as the user was created) and run them as a MySQL admin`,
    context,
  );
}

type Query = (...args: never[]) => Promise<unknown>;

function wrapQueries<T extends Pool | PoolConnection>(target: T, c: AccessContext): T {
  for (const name of ['query', 'execute'] as const) {
    const original = (target[name] as Query).bind(target);
    (target as unknown as Record<string, Query>)[name] = async (...args: never[]): Promise<unknown> => {
      try {
        return await original(...args);
      } catch (err) {
        throw translateMysqlError(err, c);
      }
    };
  }
  return target;
}

/** Makes every refusal from `pool` (its queries and its connections') an llmgw error naming the fix. */
export function explainRefusals(pool: Pool, c: AccessContext): Pool {
  wrapQueries(pool, c);
  const getConnection = pool.getConnection.bind(pool);
  pool.getConnection = async (): Promise<PoolConnection> => {
    try {
      return wrapQueries(await getConnection(), c);
    } catch (err) {
      throw translateMysqlError(err, c);
    }
  };
  return pool;
}
