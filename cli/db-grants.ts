/** `llmgw db grants ROLE`: prints the MySQL user and grants of one role (or all), from lib/store/grants.ts. */
import { readFileSync } from 'node:fs';
import { loadServerConfig } from '../config/load';
import {
  checkGrantTarget,
  DB_ROLES,
  DEFAULT_DB_USERS,
  grantStatements,
  newDbPassword,
  type DbRole,
} from '../lib/store/grants';
import { parse, UsageError } from './args';

export const GRANTS_USAGE = `
llmgw db grants ROLE [--user NAME] [--host HOST] [--database DB] [--password-file FILE] [--config FILE]

Prints the SQL that gives ROLE a MySQL user of its own with only the privileges it uses: SELECT, INSERT,
UPDATE, DELETE table by table (the gateway cannot read certificates, the CA worker cannot read API keys), and
schema changes (CREATE, ALTER, INDEX) for the migrate user alone. Nothing is sent to MySQL: read it, then run it
as a MySQL admin, e.g.  llmgw db grants gateway > gateway.sql && mysql -u root < gateway.sql

ROLE is one of:
  controlPlane    llmgw control-plane (and llmgw ctl forget-host-key)
  gateway         llmgw gateway
  caWorker        llmgw ca-worker (and llmgw ca)
  proxmoxWorker   llmgw proxmox-worker: it never connects to MySQL, so it gets no user
  migrate         llmgw db migrate: the one user that changes the schema
  all             every one of them, each under its default user name

Order: the migrate user first (its grant is on the database: it needs no tables), then llmgw db migrate as it,
then the roles' grants (a table grant needs its table), then the roles, with mysql.autoMigrate: false. After each
upgrade's db migrate, run the roles' grants again (GRANT is idempotent; a new table needs its grant). A role refused a statement says which privilege on which
table it lacked, and this command (LLMGW_MYSQL_GRANT_MISSING).

Options:
  --user NAME           the MySQL user (default llmgw_control, llmgw_gateway, llmgw_ca or llmgw_migrate)
  --host HOST           the user's host pattern: the address the role connects from, or a pattern such as
                        10.0.0.% (default %: any host)
  --database DB         the database (default: the one in --config's mysql.url, else llmgw)
  --password-file FILE  the new user's password, from a file; without it a random one is made and printed in
                        the header with the mysql.url to use (the output then holds a secret: keep it private).
                        CREATE USER IF NOT EXISTS keeps an existing user's password
  --config FILE         server.yaml, for its mysql.url (database and host)
`;

/** Runs `llmgw db grants` with `argv` (what follows `grants`). */
export async function dbGrants(argv: string[], out: (s: string) => void): Promise<void> {
  const { values, positionals } = parse(argv, {
    usage: GRANTS_USAGE,
    allowPositionals: true,
    options: {
      user: { type: 'string' },
      host: { type: 'string' },
      database: { type: 'string' },
      'password-file': { type: 'string' },
      config: { type: 'string' },
    },
  });
  const [given, ...extra] = positionals;
  const choices = [...DB_ROLES, 'all'];
  if (!given || !choices.includes(given))
    throw new UsageError(
      `${given ? `"${given}" is not a role` : 'db grants needs a ROLE'}: use one of ${choices.join(', ')}\n${GRANTS_USAGE}`,
    );
  if (extra.length) throw new UsageError(`db grants takes one ROLE (got also ${extra.join(' ')})\n${GRANTS_USAGE}`);
  if (given === 'all' && (values.user || values['password-file']))
    throw new UsageError(
      `db grants all gives each role its default user and a password of its own: leave out ${values.user ? '--user' : '--password-file'}, or run db grants ROLE per role`,
    );
  const url = values.config ? new URL(loadServerConfig(values.config).mysql.url) : null;
  const database = values.database ?? (url ? decodeURIComponent(url.pathname.slice(1)) : 'llmgw');
  const password = values['password-file'] ? readPassword(values['password-file']) : null;
  const roles: DbRole[] = given === 'all' ? [...DB_ROLES] : [given as DbRole];
  const lines = [
    `-- llmgw db grants ${given}: run as a MySQL admin after llmgw db migrate made the tables, and again after each upgrade's migrate`,
  ];
  for (const role of roles) {
    const target = {
      user: values.user ?? DEFAULT_DB_USERS[role],
      host: values.host ?? '%',
      database,
      password: password ?? newDbPassword(),
    };
    const problem = checkGrantTarget(target);
    if (problem) throw new UsageError(`${problem}\n${GRANTS_USAGE}`);
    lines.push('');
    if (role !== 'proxmoxWorker' && !password)
      lines.push(
        `-- ${role}: new password ${target.password}; its server.yaml: mysql.url: mysql://${target.user}:${target.password}@${url?.host ?? 'MYSQL-HOST:3306'}/${database}`,
      );
    lines.push(...grantStatements(role, target));
  }
  out(`${lines.join('\n')}\n`);
}

function readPassword(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8').replace(/\r?\n$/, '');
  } catch (err) {
    throw new UsageError(`--password-file ${file}: cannot read it (${(err as NodeJS.ErrnoException).code ?? err})`);
  }
  if (!text || /[\r\n]/.test(text))
    throw new UsageError(`--password-file ${file}: give a file holding the password alone, on one line`);
  return text;
}
