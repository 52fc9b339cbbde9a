/**
 * The per-role MySQL users of lib/store/grants.ts on a real MariaDB: the migrate user makes and migrates the database;
 * each role's user runs that role's own store calls (and the real gateway role serves a keyed request) with exactly
 * `llmgw db grants ROLE`'s privileges; and every one of those privileges is needed — taken away, a call fails with
 * LLMGW_MYSQL_GRANT_MISSING naming that table, that privilege and the command.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { createCaOperations } from '../../activities/ca';
import { keyDigest, keyPrefix, newApiKey } from '../../lib/api-keys';
import { initCa, makeNodeCsr } from '../../lib/pki';
import { appliedVersions, openDatabase, parseMysqlUrl } from '../../lib/store/db';
import { DrainStore } from '../../lib/store/drain';
import { grantStatements, ROLE_TABLES, type DbRole } from '../../lib/store/grants';
import { HostKeyStore } from '../../lib/store/host-keys';
import { KeyStore } from '../../lib/store/keys';
import { MIGRATIONS } from '../../lib/store/migrations';
import { ModelStatsStore, TTFT_COLUMNS } from '../../lib/store/model-stats';
import { forgetNodeRows } from '../../lib/store/node-removal';
import { PageAuthStore } from '../../lib/store/page-auth';
import { RouteChanges } from '../../lib/store/route-changes';
import { Store } from '../../lib/store/store';
import { WeightsStore } from '../../lib/store/weights';
import type { ModelSpec, NodeId } from '../../lib/types';
import { startGatewayRole } from '../../workers/gateway';
import { dropDatabase, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { engine, upstream } from '../helpers/gateway';
import { waitFor } from '../helpers/wait';

type Role = Exclude<DbRole, 'migrate' | 'proxmoxWorker'>;
const ROLES: Role[] = ['gateway', 'caWorker', 'controlPlane'];

const rootUrl = testMysqlUrl();
const { database } = parseMysqlUrl(rootUrl);
const tag = randomBytes(3).toString('hex');
const password = `pw-${tag}`;
const user = (role: DbRole): string => `lt${tag}_${role}`.slice(0, 32);
const urlOf = (role: DbRole, pw = password): string => `mysql://${user(role)}:${pw}@127.0.0.1:3306/${database}`;
const caDir = mkdtempSync(join(tmpdir(), 'llmgw-grants-ca-'));
initCa(caDir, { keyBits: 2048 });

let root: mysql.Connection;
const pools: Partial<Record<Role, mysql.Pool>> = {};

const runSql = async (lines: string[]): Promise<void> => {
  for (const sql of lines.filter((l) => !l.startsWith('--'))) await root.query(sql);
};

beforeAll(async () => {
  root = await mysql.createConnection(parseMysqlUrl(rootUrl).options);
  // The migrate user's grant is on the database: it is given before the database exists, and makes it.
  await runSql(grantStatements('migrate', { user: user('migrate'), host: '%', database, password }));
});

afterAll(async () => {
  for (const p of Object.values(pools)) await p.end().catch(() => undefined);
  for (const role of [...ROLES, 'migrate'] as DbRole[]) await root.query(`DROP USER IF EXISTS '${user(role)}'@'%'`);
  await root.end();
  await dropDatabase(rootUrl);
  rmSync(caDir, { recursive: true, force: true });
});

/** Each role's store calls, as its code makes them (run `n` names its own rows, so a run can be repeated). */
function operations(role: Role, pool: mysql.Pool, n: number): [string, () => Promise<unknown>][] {
  const store = new Store(pool);
  const node = `${role.toLowerCase()}-node-${n}` as NodeId;
  const ops: [string, () => Promise<unknown>][] = [['schema check at start', () => appliedVersions(pool)]];
  if (role === 'gateway') {
    const keys = new KeyStore(pool);
    const drains = new DrainStore(pool);
    const stats = new ModelStatsStore(pool);
    const minute = Math.floor(Date.now() / 60_000);
    const ask = { keyId: n, minute, rpm: 10, tpm: 1000, wantRequests: 1, needRequests: 1, wantTokens: 5 };
    const usage = { keyId: n, model: 'm', hour: Math.floor(Date.now() / 3_600_000) * 3_600_000 };
    ops.push(
      ['routing table', () => store.routeRows()],
      ['keys changed', () => keys.changedSince(null)],
      ['quota lease', () => keys.lease({ ...ask, needTokens: 1, debtTokens: 0 })],
      ['quota charge', () => keys.charge(n, minute, 3)],
      ['quota window', () => keys.window(n, minute)],
      ['quota prune', () => keys.pruneQuota(minute - 60)],
      ['usage', () => keys.addUsage([{ ...usage, requests: 1, refused: 0, promptTokens: 2, completionTokens: 3 }])],
      ['in-flight report', () => drains.report(`gw-${n}`, { routed: ['r1'], inflight: { r1: 1 } })],
      ['in-flight prune', () => drains.pruneGateways(86_400_000)],
      ['in-flight forget', () => drains.forget(`gw-${n}`)],
      [
        'model stats',
        () =>
          stats.write(`gw-${n}`, [
            {
              minute: minute * 60_000,
              model: 'm',
              requests: 1,
              errors5xx: 0,
              errors4xx: 0,
              ttft: TTFT_COLUMNS.map(() => 0),
            },
          ]),
      ],
      ['model stats prune', () => stats.prune()],
    );
  } else if (role === 'caWorker') {
    const ca = createCaOperations({ caDir, store });
    const hostKeys = new HostKeyStore(pool);
    const key = { type: 'ssh-ed25519', fingerprint: `SHA256:${tag}${n}`, key: 'AAAAC3NzaC1lZDI1NTE5' };
    ops.push(
      ['issue', () => ca.issueNodeCertificate({ nodeId: node })],
      ['sign csr', () => ca.signNodeCsr({ csrPem: makeNodeCsr(node).csrPem, identity: node })],
      ['revoke', () => ca.revokeNode({ nodeId: node, reason: 'test' })],
      ['crl', () => ca.currentCrl()],
      ['host keys', () => hostKeys.list(node)],
      ['learn host key', () => hostKeys.learn(node, key, '10.0.0.1')],
      ['clock', () => hostKeys.now()],
      ['registration', () => hostKeys.registration(node)],
      ['engine probe', () => hostKeys.engineProbe(node)],
    );
  } else {
    const keys = new KeyStore(pool);
    const page = new PageAuthStore(pool);
    const weights = new WeightsStore(pool);
    const spec: ModelSpec = {
      name: `model-${n}`,
      source: 'sim://x',
      replicas: 1,
      profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: [] }],
    };
    const replica = `replica-${n}`;
    const host = `host-${n}`;
    const serial = randomBytes(8).toString('hex');
    const copy = { key: `w-${n}`, url: 'https://x/w', size: 1, sha256: 'a'.repeat(64), verified: true };
    let pageKey = '';
    let session = '';
    ops.push(
      [
        'register',
        () => store.upsertNode(node, { gpus: [], adapters: [], fabrics: {}, cpuFlags: [], engines: ['sim'], host }),
      ],
      ['node state', () => store.nodeState(node)],
      ['heartbeat', () => store.heartbeat(node)],
      ['silent nodes', () => store.silentNodes(0)],
      ['mark down', () => store.markNodeDownIfSeen(node, '2026-01-01 00:00:00.000')],
      ['cordon', () => store.setNodeState(node, 'cordoned')],
      ['down', () => store.setNodeState(node, 'down')],
      ['cordoned?', () => store.isCordoned(node)],
      ['nodes', () => store.listNodes()],
      ['engines', () => store.recordEngines(node, [], 'hash')],
      ['model', () => store.upsertModel(spec)],
      ['models applied', () => store.appliedModels()],
      ['scale', () => store.setDesiredReplicas(spec.name, 2)],
      ['model', () => store.getModel(spec.name)],
      ['models', () => store.listModels()],
      ['replica', () => store.setReplica({ id: replica, model: spec.name, profile: 'default', state: 'starting' })],
      ['replicas', () => store.listReplicas()],
      ['lease', () => store.leasePorts(host, replica, 1, { base: 1000, count: 1 })],
      ['place', () => store.setShards(replica, [{ replicaId: replica, rank: 0, nodeId: node, port: 1000, gpus: [0] }])],
      ['held gpus', () => store.heldGpus()],
      ['release', () => store.releaseReplica(replica)],
      ['lease again', () => store.leasePorts(host, replica, 1, { base: 1000, count: 1 })],
      ['routes', () => store.routeRows()],
      // gateway/control/route-feed.ts: the changes pushed to gateways, tailed by id, pruned by age.
      ['route changes', () => new RouteChanges(pool).since(0, 10)],
      ['route changes newest', () => new RouteChanges(pool).latest()],
      ['route changes oldest', () => new RouteChanges(pool).oldest()],
      ['route changes prune', () => new RouteChanges(pool).prune(3_600_000)],
      ['lock', () => store.withLock(`t-${tag}`, 5, async () => 1)],
      ['event', () => store.event({ kind: 'test', message: 'm', nodeId: node, replicaId: replica })],
      ['events', () => store.recentEvents(5)],
      [
        'record certificate',
        () =>
          store.recordCertificate({
            serial,
            cn: node,
            role: 'node',
            notBefore: new Date(),
            notAfter: new Date(Date.now() + 9e7),
            pem: 'x',
          }),
      ],
      ['certificates', () => store.listCertificates({ cn: node })],
      ['certificate', () => store.certificateBySerial(serial)],
      ['revoke', () => store.revokeCertificates(node, 'test')],
      ['revoked', () => store.revokedSerials()],
      ['door token', () => store.rememberTaskToken(node, `d${n}`)],
      ['door token?', () => store.hasTaskToken(node, `d${n}`)],
      ['door token done', () => store.forgetTaskToken(node, `d${n}`)],
      ['door tokens prune', () => store.pruneTaskTokens(new Date(0))],
      [
        'key',
        () =>
          keys.create(
            { name: `k-${tag}-${n}`, models: null, rpm: 5, tpm: null, expiresAt: null },
            keyDigest(newApiKey()),
            keyPrefix(newApiKey()),
          ),
      ],
      ['keys', () => keys.list()],
      ['key id', () => keys.idOf(`k-${tag}-${n}`)],
      ['key revoke', () => keys.revoke(`k-${tag}-${n}`)],
      ['key usage', () => keys.usage(undefined, 24)],
      ['drain reports', () => new DrainStore(pool).liveReports()],
      ['stopping for', () => new DrainStore(pool).stoppingForMs(replica)],
      ['ready since', () => new DrainStore(pool).readySince(replica)],
      ['last event', () => new DrainStore(pool).lastEventAt(replica, 'test')],
      ['traffic', () => new ModelStatsStore(pool).recent(60)],
      ['page key', async () => (pageKey = (await page.createKey(`p-${tag}-${n}`)) ?? '')],
      ['page key name', () => page.keyName(pageKey)],
      ['page keys', () => page.listKeys()],
      [
        'page session',
        async () => (session = (await page.createSession({ operator: 'op', keyName: `p-${tag}-${n}` })).token),
      ],
      ['page session?', () => page.session(session)],
      ['page sign out', () => page.endSession(session)],
      ['page key revoke', () => page.revokeKey(`p-${tag}-${n}`)],
      [
        'weights report',
        () => weights.report(node, 'https://n:1', [{ ...copy, storedAt: new Date().toISOString() }], true),
      ],
      [
        'weights report more',
        () => weights.report(node, 'https://n:2', [{ ...copy, storedAt: new Date().toISOString() }], false),
      ],
      ['weights peers', () => weights.peersFor(copy.key, 'other')],
      ['weights', () => weights.list()],
      ['host keys', () => new HostKeyStore(pool).list(node)],
      ['forget host key', () => new HostKeyStore(pool).forget(node)],
      ['forget model', () => store.deleteModel(spec.name)],
      ['remove node', () => forgetNodeRows(pool, node)],
    );
  }
  return ops;
}

let run = 0;
/** Runs a role's calls in order; the first failure, or null. */
async function firstFailure(role: Role): Promise<{ op: string; err: unknown } | null> {
  const n = ++run;
  for (const [op, fn] of operations(role, pools[role]!, n)) {
    try {
      await fn();
    } catch (err) {
      return { op, err };
    }
  }
  return null;
}

test('the migrate user makes the database and migrates it; the roles get their grants', async () => {
  const pool = await openDatabase(urlOf('migrate'), { role: 'migrate' });
  expect([...(await appliedVersions(pool))].sort((a, b) => a - b)).toEqual(MIGRATIONS.map((m) => m.version));
  await pool.end();
  for (const role of ROLES) {
    await runSql(grantStatements(role, { user: user(role), host: '%', database, password }));
    // autoMigrate as by default: on an up-to-date schema a role's user needs no DDL.
    pools[role] = await openDatabase(urlOf(role), { role });
  }
});

test.each(ROLES)("the %s user's grants run every call of that role", async (role) => {
  expect(await firstFailure(role)).toBeNull();
});

test.each(ROLES)(
  'every grant of %s is needed: without it a call fails naming table, privilege and command',
  async (role) => {
    const account = `'${user(role)}'@'%'`;
    const tried: string[] = [];
    for (const [table, privileges] of Object.entries(ROLE_TABLES[role]))
      for (const privilege of privileges) {
        await root.query(`REVOKE ${privilege} ON \`${database}\`.\`${table}\` FROM ${account}`);
        const failed = await firstFailure(role);
        await root.query(`GRANT ${privilege} ON \`${database}\`.\`${table}\` TO ${account}`);
        tried.push(`${privilege} ${table}`);
        expect({ grant: `${privilege} ${table}`, failed: failed && { op: failed.op, err: failed.err } }).toMatchObject({
          failed: {
            err: {
              code: 'LLMGW_MYSQL_GRANT_MISSING',
              context: { table, privilege, role, user: user(role) },
              message: expect.stringContaining(`lacks ${privilege} on table ${database}.${table}`),
            },
          },
        });
        expect((failed!.err as Error).message).toContain(
          `llmgw db grants ${role} --user ${user(role)} --database ${database}`,
        );
      }
    expect(tried.length).toBeGreaterThan(0);
    expect(await firstFailure(role)).toBeNull();
  },
);

test('the real gateway role serves a keyed request as its user, writing quota, usage, in-flight and stats rows', async () => {
  const up = await upstream(engine());
  const control = new Store(pools.controlPlane!);
  await control.upsertModel({
    name: 'gm',
    source: 'sim://x',
    replicas: 1,
    profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: [] }],
  });
  await control.setReplica({ id: 'gm-r1', model: 'gm', profile: 'default', state: 'ready', endpoint: up.endpoint });
  const key = newApiKey();
  await new KeyStore(pools.controlPlane!).create(
    { name: `gw-${tag}`, models: null, rpm: 100, tpm: 100_000, expiresAt: null },
    keyDigest(key),
    keyPrefix(key),
  );
  const config = await testConfig({ temporalAddress: '127.0.0.1:1', mysqlUrl: urlOf('gateway') });
  const lines: string[] = [];
  const gw = await startGatewayRole({ config, log: (msg, f) => lines.push(`${msg} ${JSON.stringify(f ?? {})}`) });
  try {
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ model: 'gm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    expect(res.status).toBe(200);
    await res.text();
    await waitFor(
      async () => {
        const [rows] = await root.query<mysql.RowDataPacket[]>(
          `SELECT requests FROM \`${database}\`.key_usage u JOIN \`${database}\`.api_keys k ON k.id = u.key_id WHERE k.name = ?`,
          [`gw-${tag}`],
        );
        return rows.length > 0;
      },
      { timeoutMs: 15_000, what: "the gateway's usage row for the key" },
    );
  } finally {
    await gw.close();
    await up.close();
  }
  const count = async (table: string): Promise<number> => {
    const [rows] = await root.query<mysql.RowDataPacket[]>(`SELECT COUNT(*) AS n FROM \`${database}\`.${table}`);
    return Number(rows[0]!.n);
  };
  expect(await count('key_quota')).toBeGreaterThan(0);
  expect(await count('model_minute_stats')).toBeGreaterThan(0);
  expect(lines.filter((l) => /denied|GRANT_MISSING/i.test(l))).toEqual([]);
});

test('a role whose schema is behind, on its own user, is told to migrate as the migrate user', async () => {
  const last = Math.max(...MIGRATIONS.map((m) => m.version));
  await root.query(`DELETE FROM \`${database}\`.schema_migrations WHERE version = ?`, [last]);
  try {
    await expect(openDatabase(urlOf('gateway'), { role: 'gateway' })).rejects.toMatchObject({
      code: 'LLMGW_MYSQL_GRANT_MISSING',
      message: expect.stringMatching(
        /lacks CREATE on table .*a role's user changes no schema.*llmgw db grants migrate.*mysql\.autoMigrate: false/,
      ),
    });
  } finally {
    await root.query(
      `INSERT INTO \`${database}\`.schema_migrations (version, name, applied_at) VALUES (?, ?, NOW(3))`,
      [last, 'restored'],
    );
  }
});

test('a wrong password is a refused login naming mysql.url and the grants command', async () => {
  await expect(openDatabase(urlOf('gateway', 'wrong'), { role: 'gateway' })).rejects.toMatchObject({
    code: 'LLMGW_MYSQL_LOGIN_REFUSED',
    message: expect.stringMatching(
      new RegExp(`refused the login of user ${user('gateway')} .*mysql\\.url.*llmgw db grants gateway`),
    ),
  });
});
