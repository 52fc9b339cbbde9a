/**
 * TLS to MySQL (server.yaml mysql.tls) against a private MariaDB that refuses plain TCP (require_secure_transport):
 * the gateway role connects over verified TLS; without mysql.tls, with another CA, or with a serverName its
 * certificate does not hold, it fails at start naming the fix; a REQUIRE X509 user gets in with cert and key only.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type mysql from 'mysql2/promise';
import { issueOperatorCertificate, loadCa } from '../../lib/pki';
import { openConfiguredDatabase } from '../../lib/store/db';
import { startGatewayRole } from '../../workers/gateway';
import { TEST_API_KEY, testConfig } from '../helpers/cluster-parts';
import { startPrivateMariadb, type PrivateMariadb } from '../helpers/private-mariadb';
import { testTls } from '../helpers/tls';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-mysql-tls-'));
// The server's certificate names 127.0.0.1 and localhost (test/helpers/tls.ts).
const pki = testTls();
const otherCa = testTls().ca;
let db: PrivateMariadb;

beforeAll(async () => {
  db = await startPrivateMariadb(join(dir, 'db'), 'llmgw', {
    tls: { ca: pki.ca, cert: pki.serverCert, key: pki.serverKey, require: true },
  });
}, 120_000);

afterAll(async () => {
  await db?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const cipher = async (pool: mysql.Pool): Promise<string> => {
  const [rows] = await pool.query<mysql.RowDataPacket[]>(`SHOW SESSION STATUS LIKE 'Ssl_cipher'`);
  return String(rows[0]?.Value ?? '');
};

test('the gateway role connects with mysql.tls and serves', async () => {
  const base = await testConfig({ temporalAddress: '127.0.0.1:1', mysqlUrl: db.url });
  const config = { ...base, mysql: { url: db.url, tls: { ca: pki.ca } } };
  const gw = await startGatewayRole({ config });
  try {
    const res = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${TEST_API_KEY}` } });
    expect(res.status).toBe(200);
  } finally {
    await gw.close();
  }
  const pool = await openConfiguredDatabase({ url: db.url, tls: { ca: pki.ca } }, 'gateway');
  try {
    expect(await cipher(pool)).toMatch(/\S/);
  } finally {
    await pool.end();
  }
});

test('without mysql.tls the server refuses the login, and the error says to set mysql.tls', async () => {
  // MariaDB's require_secure_transport answers a plain login with ER_ACCESS_DENIED_ERROR (MySQL 8 with its own
  // ER_SECURE_TRANSPORT_REQUIRED, which is LLMGW_MYSQL_TLS_REQUIRED).
  await expect(openConfiguredDatabase({ url: db.url }, 'gateway')).rejects.toMatchObject({
    code: 'LLMGW_MYSQL_LOGIN_REFUSED',
    message: expect.stringMatching(
      /refused the login of user root .*If the server accepts TLS connections only, set mysql\.tls: \{ ca: FILE \}/,
    ),
  });
});

test('a CA that did not sign the server certificate fails the handshake, naming mysql.tls.ca', async () => {
  await expect(openConfiguredDatabase({ url: db.url, tls: { ca: otherCa } }, 'gateway')).rejects.toMatchObject({
    code: 'LLMGW_MYSQL_TLS_FAILED',
    message: expect.stringMatching(
      /TLS to MySQL at 127\.0\.0\.1:\d+ failed .*mysql\.tls\.ca must be the CA that signed/,
    ),
  });
});

test('serverName: a name the certificate holds passes, another fails', async () => {
  const pool = await openConfiguredDatabase({ url: db.url, tls: { ca: pki.ca, serverName: 'localhost' } });
  expect(await cipher(pool)).toMatch(/\S/);
  await pool.end();
  await expect(
    openConfiguredDatabase({ url: db.url, tls: { ca: pki.ca, serverName: 'db.example.net' } }),
  ).rejects.toMatchObject({
    code: 'LLMGW_MYSQL_TLS_FAILED',
    message: expect.stringMatching(/does not match certificate's altnames.*mysql\.tls\.serverName/),
  });
});

test('a REQUIRE X509 user gets in with mysql.tls cert and key, and is refused without', async () => {
  const admin = await openConfiguredDatabase({ url: db.url, tls: { ca: pki.ca } });
  await admin.query(`CREATE USER 'x509'@'%' IDENTIFIED BY 'pw' REQUIRE X509`);
  await admin.query('GRANT SELECT ON `llmgw`.`schema_migrations` TO ?@?', ['x509', '%']);
  await admin.end();
  const client = issueOperatorCertificate(loadCa(dirname(pki.ca)), 'mysql-client');
  writeFileSync(join(dir, 'client.crt'), client.certPem);
  writeFileSync(join(dir, 'client.key'), client.keyPem, { mode: 0o600 });
  const url = db.url.replace('root@', 'x509:pw@');
  const withCert = { ca: pki.ca, cert: join(dir, 'client.crt'), key: join(dir, 'client.key') };
  const pool = await openConfiguredDatabase({ url, autoMigrate: false, tls: withCert }, 'gateway');
  expect(await cipher(pool)).toMatch(/\S/);
  await pool.end();
  await expect(
    openConfiguredDatabase({ url, autoMigrate: false, tls: { ca: pki.ca } }, 'gateway'),
  ).rejects.toMatchObject({ code: 'LLMGW_MYSQL_LOGIN_REFUSED' });
});

test('an unreadable mysql.tls file is named before connecting', async () => {
  await expect(openConfiguredDatabase({ url: db.url, tls: { ca: join(dir, 'missing.pem') } })).rejects.toMatchObject({
    code: 'LLMGW_CONFIG_INVALID',
    message: expect.stringMatching(/mysql\.tls\.ca: cannot read .*missing\.pem \(ENOENT\)/),
  });
});
