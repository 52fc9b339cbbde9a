/**
 * `llmgw cluster --reset`: start from empty state — this cluster's own database and the entries of its own state
 * dir, each named before it is removed, and nothing else: a state dir is reset only when `llmgw cluster` wrote its
 * server.yaml, and only the entries it makes there go.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { LlmgwError } from '../../lib/errors';
import { parseMysqlUrl } from '../../lib/store/db';
import { stopLeftOver } from './temporal-dev';

/** The first line of the server.yaml `llmgw cluster` writes: what marks a state dir as one of its own. */
export const CLUSTER_CONFIG_HEADER = '# Written by `llmgw cluster` on every start';

/** What `llmgw cluster` makes in its state dir: all that a reset removes there. */
const STATE_ENTRIES = [
  'temporal.db',
  'temporal.db-shm',
  'temporal.db-wal',
  'temporal.pid',
  'temporal.log',
  'server.yaml',
  'ca',
  'certs',
  'logs',
  'engines',
  'weights',
  'models',
];

/** Databases a reset never drops, whatever --mysql-url names. */
const SYSTEM_DATABASES = new Set(['mysql', 'information_schema', 'performance_schema', 'sys']);

/**
 * Says what it removes, then drops the cluster's database and removes its state; refuses (removing nothing) a state
 * dir `llmgw cluster` did not write or a system database.
 */
export async function resetCluster(o: {
  stateDir: string;
  mysqlUrl: string;
  say: (line: string) => void;
}): Promise<void> {
  const config = join(o.stateDir, 'server.yaml');
  const ours = existsSync(config) && readFileSync(config, 'utf8').startsWith(CLUSTER_CONFIG_HEADER);
  const present = STATE_ENTRIES.filter((e) => existsSync(join(o.stateDir, e)));
  if (present.length > 0 && !ours) {
    throw new LlmgwError(
      'LLMGW_BAD_REQUEST',
      `--reset: ${o.stateDir} holds no server.yaml written by llmgw cluster, so it may not be a cluster's state dir; nothing removed (remove it yourself, or give --state-dir the cluster's)`,
      { stateDir: o.stateDir },
    );
  }
  const { options, database } = parseMysqlUrl(o.mysqlUrl);
  if (SYSTEM_DATABASES.has(database.toLowerCase()))
    throw new LlmgwError(
      'LLMGW_BAD_REQUEST',
      `--reset: --mysql-url names the system database ${database}; nothing removed`,
      { database },
    );
  o.say(
    `      --reset: dropping database ${database} on ${options.host}:${options.port}${present.length ? ` and removing from ${o.stateDir}: ${present.join(', ')}` : ` (${o.stateDir} holds no cluster state)`}`,
  );
  // A Temporal server a killed run left on temporal.db would keep writing the file removed under it.
  await stopLeftOver(join(o.stateDir, 'temporal.pid'), join(o.stateDir, 'temporal.db'), o.say);
  const admin = await mysql.createConnection(options);
  try {
    await admin.query(`DROP DATABASE IF EXISTS \`${database.replace(/`/g, '')}\``);
  } finally {
    await admin.end();
  }
  for (const e of present) rmSync(join(o.stateDir, e), { recursive: true, force: true });
}
