/** `llmgw db migrate | status | grants`: the MySQL schema as a step of its own, and each role's MySQL user. */
import { loadServerConfig } from '../config/load';
import { MIGRATIONS } from '../lib/store/migrations';
import { parse, UsageError } from './args';
import { dbGrants } from './db-grants';

const USAGE = `
llmgw db COMMAND [--config FILE]

  llmgw db migrate    apply the migrations the database lacks (under a lock: safe from several hosts at once),
                      printing each; refuses a schema a newer llmgw made (LLMGW_SCHEMA_AHEAD)
  llmgw db status     the schema's version beside this llmgw's, and the migrations missing or unknown here
  llmgw db grants ROLE
                      the CREATE USER and GRANT statements of ROLE's MySQL user, only the privileges it uses
                      (llmgw db grants --help)

Every role migrates at start unless server.yaml says mysql.autoMigrate: false; then this is the upgrade's first
step (before the control planes, gateways and agents of the new version start), and a role started on an older
schema refuses, naming this command.

Options:
  --config FILE   server.yaml (default: built-in local-cluster defaults); its mysql.url is the database
  --json          machine-readable output
`;

/** Entry for `llmgw db`. */
export async function dbCommand(
  argv: string[],
  out: (s: string) => void = (s) => process.stdout.write(s),
): Promise<void> {
  // grants has options of its own (and its own --help): it takes the rest of the line.
  const first = argv.findIndex((a, i) => !a.startsWith('-') && argv[i - 1] !== '--config');
  if (argv[first] === 'grants') return dbGrants([...argv.slice(0, first), ...argv.slice(first + 1)], out);
  const { values, positionals } = parse(argv, {
    usage: USAGE,
    allowPositionals: true,
    options: { config: { type: 'string' }, json: { type: 'boolean' } },
  });
  const [verb, ...extra] = positionals;
  if (verb !== 'migrate' && verb !== 'status')
    throw new UsageError(`${verb ? `unknown command "db ${verb}"` : 'db needs a COMMAND'}\n${USAGE}`);
  if (extra.length) throw new UsageError(`db ${verb} takes no arguments (got ${extra.join(' ')})\n${USAGE}`);
  const config = loadServerConfig(values.config);
  // MySQL's driver is loaded here, not at the top: `llmgw db --help` needs none of it.
  // eslint-disable-next-line @typescript-eslint/no-require-imports, @typescript-eslint/consistent-type-imports
  const db = require('../lib/store/db') as typeof import('../lib/store/db');
  // Opened without migrating or checking: status shows a schema behind or ahead; migrate checks it under its lock.
  const reader = await db.openDatabase(config.mysql.url, {
    migrate: false,
    check: false,
    tls: config.mysql.tls ?? null,
    ...(verb === 'migrate' ? { role: 'migrate' as const } : {}),
  });
  try {
    const before = db.schemaState(await db.appliedVersions(reader));
    let applied: number[] = [];
    if (verb === 'migrate') {
      await db.migrate(reader);
      const after = db.schemaState(await db.appliedVersions(reader));
      applied = before.missing.filter((v) => !after.missing.includes(v));
    }
    const now = db.schemaState(await db.appliedVersions(reader));
    const name = (v: number): string => MIGRATIONS.find((m) => m.version === v)?.name ?? '(unknown here)';
    if (values.json) {
      out(
        `${JSON.stringify({ schema: now.current, binary: db.SCHEMA_VERSION, applied, missing: now.missing, unknown: now.unknown })}\n`,
      );
      return;
    }
    const lines: string[] = [];
    if (verb === 'migrate') {
      for (const v of applied) lines.push(`applied ${v} ${name(v)}`);
      if (!applied.length) lines.push('nothing to apply');
    }
    lines.push(
      `schema ${now.current}, this llmgw ${db.SCHEMA_VERSION}: ${now.missing.length ? `missing ${now.missing.map((v) => `${v} ${name(v)}`).join(', ')} (run llmgw db migrate)` : 'up to date'}`,
    );
    if (now.unknown.length) lines.push(`unknown here (a newer llmgw made them): ${now.unknown.join(', ')}`);
    out(`${lines.join('\n')}\n`);
  } finally {
    await reader.end();
  }
}
