/**
 * Which MySQL privileges each llmgw role needs, in one place: `llmgw db grants ROLE` prints them, a denied statement
 * is explained by them (lib/store/access.ts), and test/integration/db-grants.test.ts proves them against the roles'
 * own store calls (every grant here is needed, and none is missing).
 */
import { randomBytes } from 'node:crypto';

/** The roles that may be given a MySQL user of their own; `migrate` is the user `llmgw db migrate` runs as. */
export const DB_ROLES = ['controlPlane', 'gateway', 'caWorker', 'proxmoxWorker', 'migrate'] as const;
export type DbRole = (typeof DB_ROLES)[number];

/** Row privileges granted table by table. */
export type TablePrivilege = 'SELECT' | 'INSERT' | 'UPDATE' | 'DELETE';

type TableGrants = Readonly<Record<string, readonly TablePrivilege[]>>;

const S = ['SELECT'] as const;
const SI = ['SELECT', 'INSERT'] as const;
const SIU = ['SELECT', 'INSERT', 'UPDATE'] as const;
const SID = ['SELECT', 'INSERT', 'DELETE'] as const;
const SIUD = ['SELECT', 'INSERT', 'UPDATE', 'DELETE'] as const;

/**
 * Each role's tables and the row privileges it uses on them. SELECT goes with every UPDATE and DELETE: their WHERE
 * clauses read columns. Every role reads schema_migrations (the schema check at start).
 */
export const ROLE_TABLES: Readonly<Record<Exclude<DbRole, 'migrate'>, TableGrants>> = {
  // lib/store/store.ts (all of it: the control API, the control worker's activities, an in-process CA when ca.key
  // sits beside tls.ca), keys.ts (ctl keys), drain.ts (drain waits), model-stats.ts and page-auth.ts (the cluster
  // page), weights.ts (nodes' weight reports), node-removal.ts (remove-node), host-keys.ts (ctl forget-host-key),
  // route-changes.ts (the route feed to gateways), workers/control/metrics.ts.
  controlPlane: {
    schema_migrations: S,
    nodes: SIUD,
    models: SIUD,
    replicas: SIU,
    route_changes: SID,
    shards: SID,
    port_leases: SIU,
    events: SI,
    certificates: SIU,
    door_task_tokens: SID,
    host_keys: ['SELECT', 'DELETE'],
    weight_copies: SIUD,
    gateway_inflight: S,
    page_keys: SIU,
    page_sessions: SID,
    api_keys: SIU,
    key_usage: S,
    model_minute_stats: S,
  },
  // workers/gateway.ts: the routing table (store.ts routeRows, with the newest route change it includes), keys and quotas (keys.ts), in-flight reports
  // (drain.ts), per-minute model stats (model-stats.ts).
  gateway: {
    schema_migrations: S,
    models: S,
    replicas: S,
    route_changes: S,
    api_keys: S,
    key_quota: SIUD,
    key_usage: SIU,
    gateway_inflight: SIUD,
    model_minute_stats: SIUD,
  },
  // workers/ca.ts and llmgw ca: certificates and the CRL (store.ts), onboarding's ssh host keys and its waits on
  // the node's registration (host-keys.ts).
  caWorker: {
    schema_migrations: S,
    certificates: SIU,
    host_keys: SI,
    nodes: S,
  },
  // Provisioning talks to Proxmox and Temporal only.
  proxmoxWorker: {},
};

/**
 * The migrate user's privileges, on the whole database: the migrations' DDL, their data fixes, and creating the
 * database when it is missing (CREATE on db.* allows CREATE DATABASE db). A migration that needs more (DROP, say)
 * adds it here.
 */
export const MIGRATE_PRIVILEGES = ['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'CREATE', 'ALTER', 'INDEX'] as const;

/** The user name `llmgw db grants ROLE` gives a role unless told (--user). */
export const DEFAULT_DB_USERS: Readonly<Record<DbRole, string>> = {
  controlPlane: 'llmgw_control',
  gateway: 'llmgw_gateway',
  caWorker: 'llmgw_ca',
  proxmoxWorker: 'llmgw_proxmox',
  migrate: 'llmgw_migrate',
};

/** Whether `role`'s grants hold `privilege` on `table` (the migrate user holds its privileges on every table). */
export function roleHas(role: DbRole, table: string, privilege: string): boolean {
  if (role === 'migrate') return (MIGRATE_PRIVILEGES as readonly string[]).includes(privilege);
  return (ROLE_TABLES[role][table] ?? []).includes(privilege as TablePrivilege);
}

/** Where a role's user lives. */
export interface GrantTarget {
  user: string;
  host: string;
  database: string;
  /** the new user's password; only used when the user does not exist yet */
  password: string;
}

const NAME_RE = /^[A-Za-z0-9_.-]{1,32}$/;
const HOST_RE = /^[A-Za-z0-9_.%:-]{1,255}$/;
const DATABASE_RE = /^[A-Za-z0-9_$-]{1,64}$/;

/** The problem with a user, host or database name, or null; names are written into SQL, so only plain ones pass. */
export function checkGrantTarget(t: Pick<GrantTarget, 'user' | 'host' | 'database'>): string | null {
  if (!NAME_RE.test(t.user))
    return `--user "${t.user}" is not a MySQL user name llmgw writes: use letters, digits, '_', '.', '-' (at most 32)`;
  if (!HOST_RE.test(t.host))
    return `--host "${t.host}" is not a MySQL host pattern: give a host name, an address or a pattern such as 10.0.0.% or %`;
  if (!DATABASE_RE.test(t.database))
    return `--database "${t.database}" is not a database name llmgw writes: use letters, digits, '_', '$', '-'`;
  return null;
}

/** A random password for a new user (printed once, in the statements' header). */
export function newDbPassword(): string {
  return randomBytes(18).toString('base64url');
}

const sqlString = (s: string): string => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

/** The CREATE USER and GRANT statements that give `role` exactly its privileges; comment lines start with --. */
export function grantStatements(role: DbRole, t: GrantTarget): string[] {
  const account = `${sqlString(t.user)}@${sqlString(t.host)}`;
  const db = `\`${t.database}\``;
  if (role === 'proxmoxWorker')
    return ['-- proxmoxWorker: the Proxmox worker does not connect to MySQL; it needs no user.'];
  const out = [
    `-- ${role}: MySQL user ${account} on database ${t.database}`,
    `CREATE USER IF NOT EXISTS ${account} IDENTIFIED BY ${sqlString(t.password)};`,
  ];
  if (role === 'migrate') out.push(`GRANT ${MIGRATE_PRIVILEGES.join(', ')} ON ${db}.* TO ${account};`);
  else
    for (const [table, privileges] of Object.entries(ROLE_TABLES[role]))
      out.push(`GRANT ${privileges.join(', ')} ON ${db}.\`${table}\` TO ${account};`);
  return out;
}
