/**
 * The schema as a step of its own (mysql.autoMigrate: false): `llmgw db migrate` and `db status` on a real MariaDB,
 * a role refusing a schema behind its own (naming the command) and one ahead of it (naming the upgrade), with
 * nothing written either way.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type mysql from 'mysql2/promise';
import { MIGRATIONS } from '../../lib/store/migrations';
import { openDatabase, SCHEMA_VERSION } from '../../lib/store/db';
import { llmgw } from '../helpers/cli';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';

const url = testMysqlUrl();
const dir = mkdtempSync(join(tmpdir(), 'llmgw-db-'));
const config = join(dir, 'server.yaml');
writeFileSync(config, `mysql:\n  url: ${url}\n  autoMigrate: false\n`);

afterAll(async () => {
  await dropDatabase(url);
  rmSync(dir, { recursive: true, force: true });
});

const tables = async (): Promise<string[]> => {
  const pool = await openDatabase(url, { migrate: false, check: false });
  try {
    const [rows] = await pool.query<mysql.RowDataPacket[]>('SHOW TABLES');
    return rows.map((r) => String(Object.values(r)[0]));
  } finally {
    await pool.end();
  }
};

test('a role with autoMigrate: false refuses an unmigrated schema, naming llmgw db migrate, and writes nothing', async () => {
  await expect(openDatabase(url, { migrate: false })).rejects.toMatchObject({
    code: 'LLMGW_SCHEMA_BEHIND',
    message: expect.stringMatching(
      new RegExp(
        `schema is at version 0, older than this llmgw's ${SCHEMA_VERSION} .*run llmgw db migrate --config FILE`,
      ),
    ),
  });
  expect(await tables()).toEqual([]);
  const role = await llmgw(['gateway', '--config', config]);
  expect(role.code).toBe(1);
  // Its JSON error line (as every role logs a start failure).
  expect(role.stderr).toMatch(/"code":"LLMGW_SCHEMA_BEHIND".*run llmgw db migrate/);
});

test('db status shows what is missing; db migrate applies each migration once, then says nothing to apply', async () => {
  const status = await llmgw(['db', 'status', '--config', config]);
  expect(status.code).toBe(0);
  expect(status.stdout).toMatch(new RegExp(`^schema 0, this llmgw ${SCHEMA_VERSION}: missing 1 `, 'm'));
  const first = await llmgw(['db', 'migrate', '--config', config]);
  expect(first.code).toBe(0);
  expect(first.stdout.match(/^applied \d+ /gm)).toHaveLength(MIGRATIONS.length);
  expect(first.stdout).toMatch(new RegExp(`^schema ${SCHEMA_VERSION}, this llmgw ${SCHEMA_VERSION}: up to date$`, 'm'));
  const again = await llmgw(['db', 'migrate', '--config', config, '--json']);
  expect(JSON.parse(again.stdout)).toEqual({
    schema: SCHEMA_VERSION,
    binary: SCHEMA_VERSION,
    applied: [],
    missing: [],
    unknown: [],
  });
  const pool = await openDatabase(url, { migrate: false });
  await pool.end();
});

test('a schema ahead of this llmgw is refused by the roles and by db migrate, naming the upgrade', async () => {
  const pool = await openDatabase(url, { migrate: false });
  await pool.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, NOW(3))', [
    SCHEMA_VERSION + 1,
    'from a newer llmgw',
  ]);
  await pool.end();
  for (const migrate of [true, false])
    await expect(openDatabase(url, { migrate })).rejects.toMatchObject({
      code: 'LLMGW_SCHEMA_AHEAD',
      message: expect.stringMatching(/newer than this llmgw's .*upgrade llmgw on this host/),
    });
  const run = await llmgw(['db', 'migrate', '--config', config]);
  expect(run.code).toBe(1);
  expect(run.stderr).toMatch(/LLMGW_SCHEMA_AHEAD/);
  const status = await llmgw(['db', 'status', '--config', config]);
  expect(status.stdout).toMatch(new RegExp(`unknown here \\(a newer llmgw made them\\): ${SCHEMA_VERSION + 1}`));
});
