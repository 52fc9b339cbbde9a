/** Per-role MySQL grants, refusals explained, and server.yaml's mysql.tls, without a server. */
import { parseServerConfig, type ConfigError } from '../../config/load';
import { dbCommand } from '../../cli/db';
import { parseDenial, translateMysqlError, type AccessContext } from '../../lib/store/access';
import { checkGrantTarget, grantStatements, ROLE_TABLES } from '../../lib/store/grants';
import { MIGRATIONS } from '../../lib/store/migrations';
import { thrownWithCode } from '../helpers/errors';

const ctx: AccessContext = { role: 'gateway', user: 'gw', host: 'db', port: 3306, database: 'llmgw', tls: false };
const denied = (message: string, code = 'ER_TABLEACCESS_DENIED_ERROR'): Error =>
  Object.assign(new Error(message), { code });

describe('grants', () => {
  test('every table the migrations make is granted to some role, and every granted table exists', () => {
    const made = new Set(
      MIGRATIONS.flatMap((m) => m.statements.map((s) => /CREATE TABLE (\w+)/.exec(s)?.[1])).filter(Boolean),
    );
    made.add('schema_migrations');
    const granted = new Set(Object.values(ROLE_TABLES).flatMap((t) => Object.keys(t)));
    expect([...granted].filter((t) => !made.has(t))).toEqual([]);
    expect([...made].filter((t) => !granted.has(t!))).toEqual([]);
  });

  test("a role's statements create its user and grant table by table; migrate gets DDL on the database", () => {
    const t = { user: 'gw', host: '10.0.0.%', database: 'llmgw', password: "it's" };
    const gw = grantStatements('gateway', t);
    expect(gw).toContain(`CREATE USER IF NOT EXISTS 'gw'@'10.0.0.%' IDENTIFIED BY 'it\\'s';`);
    expect(gw).toContain("GRANT SELECT ON `llmgw`.`api_keys` TO 'gw'@'10.0.0.%';");
    expect(gw.join('\n')).not.toMatch(/certificates|CREATE,|ALTER/);
    expect(grantStatements('migrate', t)).toContain(
      "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX ON `llmgw`.* TO 'gw'@'10.0.0.%';",
    );
    expect(grantStatements('proxmoxWorker', t).filter((l) => !l.startsWith('--'))).toEqual([]);
  });

  test('names that would need quoting in SQL are refused', () => {
    expect(checkGrantTarget({ user: "x'; DROP", host: '%', database: 'llmgw' })).toMatch(/--user .* is not/);
    expect(checkGrantTarget({ user: 'x', host: 'a b', database: 'llmgw' })).toMatch(/--host .* is not/);
    expect(checkGrantTarget({ user: 'x', host: '%', database: 'a`b' })).toMatch(/--database .* is not/);
  });

  test('llmgw db grants prints one role, and refuses an unknown one naming the roles', async () => {
    let out = '';
    await dbCommand(['grants', 'caWorker', '--user', 'ca1', '--database', 'prod'], (s) => (out += s));
    expect(out).toMatch(
      /^-- caWorker: new password \S+; its server\.yaml: mysql\.url: mysql:\/\/ca1:\S+@MYSQL-HOST:3306\/prod$/m,
    );
    expect(out).toContain("GRANT SELECT, INSERT, UPDATE ON `prod`.`certificates` TO 'ca1'@'%';");
    await expect(dbCommand(['grants', 'worker'], () => undefined)).rejects.toThrow(
      /"worker" is not a role: use one of controlPlane, gateway, caWorker, proxmoxWorker, migrate, all/,
    );
    await expect(dbCommand(['grants', 'all', '--user', 'x'], () => undefined)).rejects.toThrow(/leave out --user/);
  });
});

describe('refusals explained', () => {
  test("MariaDB's and MySQL's denial messages give privilege and table", () => {
    expect(parseDenial("INSERT command denied to user 'gw'@'10.0.0.2' for table `llmgw`.`key_usage`")).toEqual({
      privilege: 'INSERT',
      table: 'key_usage',
    });
    expect(parseDenial("SELECT command denied to user 'gw'@'h' for table 'api_keys'")).toEqual({
      privilege: 'SELECT',
      table: 'api_keys',
    });
    expect(parseDenial("UPDATE command denied to user 'gw'@'h' for column 'a' in table 't'")).toEqual({
      privilege: 'UPDATE',
      table: 't',
      column: 'a',
    });
    expect(parseDenial('Lock wait timeout exceeded')).toBeNull();
  });

  test('a missing grant names table, privilege and command; one the map lacks is called a bug', () => {
    const e = translateMysqlError(denied("SELECT command denied to user 'gw'@'h' for table `llmgw`.`api_keys`"), ctx);
    expect(e).toMatchObject({
      code: 'LLMGW_MYSQL_GRANT_MISSING',
      context: { table: 'api_keys', privilege: 'SELECT', role: 'gateway' },
      message: expect.stringContaining(
        'lacks SELECT on table llmgw.api_keys (ER_TABLEACCESS_DENIED_ERROR), which the gateway role needs: print its grants with llmgw db grants gateway --user gw --database llmgw',
      ),
    });
    const bug = translateMysqlError(
      denied("SELECT command denied to user 'gw'@'h' for table `llmgw`.`certificates`"),
      ctx,
    );
    expect((bug as Error).message).toMatch(/a bug in llmgw's grants .*GRANT SELECT ON `llmgw`.`certificates`/);
  });

  test('other errors pass through unchanged', () => {
    const dup = Object.assign(new Error('Duplicate entry'), { code: 'ER_DUP_ENTRY' });
    expect(translateMysqlError(dup, ctx)).toBe(dup);
    expect(translateMysqlError('text', ctx)).toBe('text');
  });
});

describe('mysql.tls in server.yaml', () => {
  test('absent or null is no TLS; ca, cert, key and serverName are read', () => {
    expect(parseServerConfig('', 'x').mysql.tls).toBeNull();
    expect(parseServerConfig('mysql:\n  tls: null\n', 'x').mysql.tls).toBeNull();
    expect(
      parseServerConfig('mysql:\n  tls: { ca: /a.pem, cert: /c.pem, key: /k.pem, serverName: db.example.net }\n', 'x')
        .mysql.tls,
    ).toEqual({ ca: '/a.pem', cert: '/c.pem', key: '/k.pem', serverName: 'db.example.net' });
  });

  test('a cert without its key, a missing ca and an unknown key are each named', () => {
    const issues = (text: string): string[] =>
      thrownWithCode<ConfigError>(() => parseServerConfig(text, 'server.yaml'), 'LLMGW_CONFIG_INVALID').issues.map(
        (i) => `${i.keyPath}: ${i.problem}`,
      );
    expect(issues('mysql:\n  tls: { ca: /a.pem, cert: /c.pem }\n')).toEqual([
      'mysql.tls.key: is missing while mysql.tls.cert is set',
    ]);
    expect(issues('mysql:\n  tls: { cert: /c.pem, key: /k.pem }\n')[0]).toMatch(/^mysql\.tls\.ca: /);
    expect(issues('mysql:\n  tls: { ca: /a.pem, rejectUnauthorized: false }\n')[0]).toMatch(
      /^mysql\.tls\.rejectUnauthorized: /,
    );
  });
});
