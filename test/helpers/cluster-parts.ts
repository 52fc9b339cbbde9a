/** Real parts for tests: a Temporal dev server, a MariaDB database of their own, a test config. */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { startTemporalDev, type DevServer } from '../../cli/cluster/temporal-dev';
import { DEFAULT_CONFIG } from '../../config/defaults';
import type { ServerConfig } from '../../config/types';
import { parseMysqlUrl } from '../../lib/store/db';
import type { ModelSpec } from '../../lib/types';
import { freePort, testEnginePortBase } from './ports';
import { TEST_API_KEY } from './test-key';
import { testTls } from './tls';

export { TEST_API_KEY };

/** A headless, in-memory Temporal dev server on a free port. */
export async function startTestTemporal(): Promise<DevServer> {
  return startTemporalDev({ port: await freePort(), uiPort: null, dbFile: null });
}

/** A database name of this test's own on the local MariaDB (so tests pass beside a running cluster). */
export function testMysqlUrl(): string {
  return `mysql://root@127.0.0.1:3306/llmgw_test_${process.pid}_${randomBytes(3).toString('hex')}`;
}

/** Drops a test database. */
export async function dropDatabase(url: string): Promise<void> {
  const { options, database } = parseMysqlUrl(url);
  const c = await mysql.createConnection(options);
  await c.query(`DROP DATABASE IF EXISTS \`${database}\``);
  await c.end();
}

/** A ServerConfig for tests: the defaults with this test's servers and ports, and a CA of its own (tls). */
export async function testConfig(o: {
  temporalAddress: string;
  mysqlUrl: string;
  catalog?: ModelSpec[];
}): Promise<ServerConfig> {
  const cp = await freePort();
  const gw = await freePort();
  const door = await freePort();
  // test/helpers/ports.ts says where (below the ephemeral range, apart from test clusters and other workers).
  const engineBase = testEnginePortBase();
  return {
    ...DEFAULT_CONFIG,
    temporal: { ...DEFAULT_CONFIG.temporal, address: o.temporalAddress },
    mysql: { url: o.mysqlUrl },
    listeners: {
      controlPlane: { host: '127.0.0.1', port: cp },
      gateway: { host: '127.0.0.1', port: gw },
      temporalDoor: { host: '127.0.0.1', port: door },
    },
    tls: testTls(),
    gateway: { ...DEFAULT_CONFIG.gateway, apiKeys: [TEST_API_KEY] },
    enginePorts: { base: engineBase, count: 100 },
    catalog: o.catalog ?? DEFAULT_CONFIG.catalog,
  };
}
