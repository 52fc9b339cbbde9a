/**
 * `llmgw cluster` (the real command) refuses to start when one of its ports is held, naming the port, its role and
 * the process that holds it, before it starts or writes anything; and `--reset` refuses a state dir that
 * `llmgw cluster` did not write, removing nothing. (A reset that runs is in test/e2e/local-cluster.test.ts.)
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { parseMysqlUrl } from '../../lib/store/db';
import { llmgw } from '../helpers/cli';
import { testMysqlUrl } from '../helpers/cluster-parts';
import { clusterBasePort } from '../helpers/ports';

const listen = (port: number): Promise<Server> =>
  new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => resolve(s));
  });

/** A base port whose cluster ports (the five first, the three node doors at +10) are free now. */

async function databaseExists(url: string): Promise<boolean> {
  const { options, database } = parseMysqlUrl(url);
  const c = await mysql.createConnection(options);
  try {
    const [rows] = await c.query<mysql.RowDataPacket[]>(
      'SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?',
      [database],
    );
    return rows.length > 0;
  } finally {
    await c.end();
  }
}

describe('llmgw cluster before it starts anything', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-cluster-ports-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('17: a port held by another process is refused, naming the port, its role and the process; nothing is started or written', async () => {
    const base = await clusterBasePort();
    const stranger = await listen(base + 3);
    const stateDir = join(dir, 'taken');
    const url = testMysqlUrl();
    try {
      const r = await llmgw(
        ['cluster', '--state-dir', stateDir, '--base-port', String(base), '--mysql-url', url],
        60_000,
      );
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(
        new RegExp(
          `^llmgw: LLMGW_PORT_TAKEN: nothing started: port ${base + 3} \\(gateway\\) is held by pid ${process.pid} \\(.*node.*\\)\\. stop it, or choose another --base-port\\n$`,
        ),
      );
      expect(r.stdout).not.toMatch(/is up/);
      expect(existsSync(stateDir)).toBe(false);
      expect(await databaseExists(url)).toBe(false);
    } finally {
      await new Promise((r) => stranger.close(r));
    }
  }, 90_000);

  test("a sim node's door port held by another process is refused like the others; with --no-door it is not the cluster's", async () => {
    const base = await clusterBasePort();
    const gateway = await listen(base + 3);
    const door = await listen(base + 11);
    const stateDir = join(dir, 'door-taken');
    const url = testMysqlUrl();
    const held = (port: number, role: string): string =>
      `port ${port} \\(${role}\\) is held by pid ${process.pid} \\(.*node.*\\)`;
    try {
      const r = await llmgw(
        ['cluster', '--state-dir', stateDir, '--base-port', String(base), '--mysql-url', url],
        60_000,
      );
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(
        new RegExp(
          `^llmgw: LLMGW_PORT_TAKEN: nothing started: ${held(base + 3, 'gateway')}; ${held(base + 11, "sim-b's node door")}\\. stop it, or choose another --base-port\\n$`,
        ),
      );
      const noDoor = await llmgw(
        ['cluster', '--no-door', '--state-dir', stateDir, '--base-port', String(base), '--mysql-url', url],
        60_000,
      );
      expect(noDoor.code).toBe(1);
      expect(noDoor.stderr).toMatch(
        new RegExp(`^llmgw: LLMGW_PORT_TAKEN: nothing started: ${held(base + 3, 'gateway')}\\. stop it`),
      );
      expect(existsSync(stateDir)).toBe(false);
      expect(await databaseExists(url)).toBe(false);
    } finally {
      await Promise.all([gateway, door].map((s) => new Promise((r) => s.close(r))));
    }
  }, 90_000);

  test('17: --reset refuses a state dir llmgw cluster did not write, and removes nothing', async () => {
    const stateDir = join(dir, 'not-ours');
    mkdirSync(join(stateDir, 'logs'), { recursive: true });
    writeFileSync(join(stateDir, 'logs', 'mine.log'), 'keep me');
    const r = await llmgw(
      [
        'cluster',
        '--reset',
        '--state-dir',
        stateDir,
        '--base-port',
        String(await clusterBasePort()),
        '--mysql-url',
        testMysqlUrl(),
      ],
      60_000,
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `llmgw: LLMGW_BAD_REQUEST: --reset: ${stateDir} holds no server.yaml written by llmgw cluster, so it may not be a cluster's state dir; nothing removed (remove it yourself, or give --state-dir the cluster's)\n`,
    );
    expect(existsSync(join(stateDir, 'logs', 'mine.log'))).toBe(true);
  }, 90_000);
});
