/** `llmgw init ROLE`: a commented server.yaml for one role, then a check of what this host reaches. */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { ConfigError, loadServerConfig } from '../config/load';
import { checkRole } from '../lib/deploy/reach';
import { INIT_ROLES, renderRoleConfig, roleFlags, type InitRole, type InitValues } from '../lib/deploy/server-yaml';
import { roleConfigPath } from '../lib/deploy/units';
import { parse, UsageError } from './args';
import { table } from './table';

const USAGE = `
llmgw init ROLE [--out FILE] [--force] [--temporal HOST:PORT] [--mysql URL] [--proxmox URL]
llmgw init ROLE --check FILE

Writes the server.yaml of one role for a host of a real deployment (docs/deploying.md), then checks what this host
reaches with it. ROLE is one of: ${INIT_ROLES.join(', ')}. (The agent reads no server.yaml: llmgw onboard-node
writes its flags into /etc/llmgw/agent.sh.)

The file holds only the sections and keys that role reads, each with config/server.example.yaml's comment. Values a
deployment sets differently from the local cluster are marked "# llmgw init: …" with where they come from (the
certificate paths, listeners on 0.0.0.0, mysql.autoMigrate: false). Values only you know are null and marked
"# REQUIRED" until you fill them in or give them here; the role refuses to start on them, naming the key:

  --temporal HOST:PORT   temporal.address, Temporal's frontend (control-plane, ca-worker, proxmox-worker)
  --mysql URL            mysql.url, mysql://USER:PASSWORD@HOST:3306/llmgw, one user per role
                         (control-plane, gateway, ca-worker)
  --proxmox URL          proxmox.url, https://HOST:8006 (proxmox-worker)

  --out FILE             where to write (default /etc/llmgw/ROLE.yaml, where the role's systemd unit reads it)
  --force                overwrite FILE; without it an existing file is never touched
  --check FILE           write nothing: check FILE as it is (after you filled it in); exits 1 when something is
                         unreachable

The check prints one line per thing the role needs at start — Temporal's address (a TCP connect), MySQL (a login
and SELECT 1 in the database), the Proxmox API, the certificate and secret files — as ok or unreachable, with the
fix. Writing never waits on it: a file is written even where nothing is reachable yet.

Example, on a gateway host:
  llmgw init gateway --mysql 'mysql://llmgw_gateway:SECRET@db.internal:3306/llmgw'
`;

/** Entry for `llmgw init`. */
export async function initCommand(
  argv: string[],
  out: (s: string) => void = (s) => process.stdout.write(s),
): Promise<void> {
  const { values, positionals } = parse(argv, {
    usage: USAGE,
    allowPositionals: true,
    options: {
      out: { type: 'string' },
      force: { type: 'boolean' },
      check: { type: 'string' },
      temporal: { type: 'string' },
      mysql: { type: 'string' },
      proxmox: { type: 'string' },
    },
  });
  const [roleName, ...extra] = positionals;
  if (roleName === 'agent')
    throw new UsageError(
      'the agent reads no server.yaml: llmgw onboard-node writes its flags into /etc/llmgw/agent.sh and installs ' +
        'share/systemd/llmgw-agent.service (llmgw agent --help lists them). Run llmgw init on the control side.',
    );
  if (!roleName || !(INIT_ROLES as readonly string[]).includes(roleName))
    throw new UsageError(
      `${roleName ? `unknown role "${roleName}"` : 'init needs a ROLE'}: one of ${INIT_ROLES.join(', ')}\n${USAGE}`,
    );
  if (extra.length) throw new UsageError(`init takes one ROLE (got also ${extra.join(' ')})\n${USAGE}`);
  const role = roleName as InitRole;
  const given: InitValues = {};
  for (const k of ['temporal', 'mysql', 'proxmox'] as const) {
    const v = values[k];
    if (v === undefined) continue;
    if (!roleFlags(role).includes(k))
      throw new UsageError(
        `--${k}: the ${role} role does not read it (it takes ${roleFlags(role)
          .map((f) => `--${f}`)
          .join(', ')})`,
      );
    given[k] = v;
  }

  let file: string;
  if (values.check !== undefined) {
    if (values.out !== undefined || values.force || Object.keys(given).length)
      throw new UsageError(`--check FILE writes nothing: give it alone with the ROLE\n${USAGE}`);
    file = values.check;
  } else {
    file = values.out ?? roleConfigPath(role);
    if (existsSync(file) && !values.force)
      throw new UsageError(
        `${file} exists: llmgw init does not overwrite it. Pass --force to replace it, --out FILE to write elsewhere, or --check ${file} to check it as it is`,
      );
    mkdirSync(dirname(file), { recursive: true });
    // 0640: it may hold a MySQL password (mysql.url); the role's group reads it.
    writeFileSync(file, renderRoleConfig(role, given), { mode: 0o640 });
    out(`wrote ${file} (the ${role} role's server.yaml)\n`);
  }

  let config;
  try {
    config = loadServerConfig(file);
  } catch (err) {
    if (!(err instanceof ConfigError) && (err as { code?: string }).code !== 'LLMGW_CONFIG_INVALID') throw err;
    out(
      `not checked yet: ${file} does not load:\n${(err as Error).message}\n` +
        `fill in what it names (the values marked REQUIRED), then: llmgw init ${role} --check ${file}\n`,
    );
    if (values.check !== undefined) process.exitCode = 1;
    return;
  }
  const reach = await checkRole(role, config);
  out(
    table(
      ['CHECK', 'TARGET', 'RESULT', 'FIX'],
      reach.map((r) => [r.what, r.target, r.ok ? `ok (${r.detail})` : r.detail, r.ok ? '' : r.fix]),
    ),
  );
  const bad = reach.filter((r) => !r.ok).length;
  out(bad ? `${bad} of ${reach.length} not ok: fix them before starting llmgw ${role}\n` : `all ${reach.length} ok\n`);
  if (bad && values.check !== undefined) process.exitCode = 1;
}
