/** `llmgw ca …`: the cluster's certificate authority, run on the host of the llmgw-ca worker. */
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createCaOperations, type CaOperations } from '../activities/ca';
import { loadServerConfig } from '../config/load';
import { quoteInput } from '../lib/errors';
import {
  CA_VALIDITY_DAYS,
  checkNodeId,
  DEFAULT_CA_DIR,
  DEFAULT_VALIDITY_DAYS,
  initCa,
  type ClientRole,
} from '../lib/pki';
import { openConfiguredDatabase } from '../lib/store/db';
import { Store } from '../lib/store/store';
import { intOption, parse, UsageError } from './args';

const DIR = `  --dir DIR         the CA directory (default ${DEFAULT_CA_DIR}, relative to the working directory)`;
const DB = `  --config FILE     server.yaml whose mysql.url records the certificates (default: the local MariaDB)
  --mysql-url URL   overrides the config's mysql.url`;

const VERBS = {
  init: `
llmgw ca init [--dir DIR] [--cn NAME] [--days N]

Creates the cluster CA: a self-signed RSA-3072 certificate (ca.crt, mode 0644) and its key (ca.key,
mode 0600). Refuses when DIR already holds a CA — every certificate it issued would stop verifying.

${DIR}
  --cn NAME         the CA's common name (default "llmgw cluster CA")
  --days N          how long the CA is valid (default ${CA_VALIDITY_DAYS})
`,
  issue: `
llmgw ca issue --node ID | --operator NAME | --gateway NAME [--out DIR] [--days N] [--dir DIR] [--config FILE]

Issues a node's client certificate (CN and DNS SAN = the node id, clientAuth) with a new RSA-2048 key,
records it in MySQL and writes OUT/node.crt, OUT/node.key (mode 0600) and OUT/ca.crt. With --operator, an
operator certificate instead (role operator: what llmgw ctl presents; server.yaml tls.clientCert/clientKey),
written as OUT/operator.crt and OUT/operator.key. With --gateway, a gateway's (role gateway: what a gateway
presents to the control plane and to the nodes' doors; server.yaml tls.gatewayCert/gatewayKey), written as
OUT/gateway.crt and OUT/gateway.key; it can do nothing an operator or a node can.

  --node ID         the node id: 2-32 of a-z, 0-9 and '-', starting with a letter (also its hostname)
  --operator NAME   an operator's name, same alphabet (e.g. ops-alice)
  --gateway NAME    a gateway's name, same alphabet (e.g. gw-1)
  --out DIR         where to write the files (default .llmgw/certs/ID)
  --days N          validity (default ${DEFAULT_VALIDITY_DAYS}); the agent renews at two thirds of it
${DIR}
${DB}
`,
  'issue-server': `
llmgw ca issue-server --name NAME --host H[,H...] [--out DIR] [--days N] [--dir DIR] [--config FILE]

Issues a server certificate (serverAuth) whose SANs are the hosts clients connect to, e.g. the control
plane's; records it and writes OUT/server.crt, OUT/server.key (mode 0600) and OUT/ca.crt.

  --name NAME       the certificate's CN, e.g. control-plane
  --host H,...      DNS names and IP addresses, e.g. --host cp.example.net,10.0.0.5,127.0.0.1
  --out DIR         where to write the files (default .llmgw/certs/NAME)
  --days N          validity (default ${DEFAULT_VALIDITY_DAYS})
${DIR}
${DB}
`,
  crl: `
llmgw ca crl [--pem] [--dir DIR] [--config FILE]

Signs a fresh certificate revocation list of every revoked, unexpired certificate and writes it to
DIR/crl.pem (PEM "X509 CRL", valid 7 days; publish a new one within 3.5). Revoke with llmgw ctl revoke NODE.

  --pem             also print the CRL on stdout
${DIR}
${DB}
`,
} as const;

type Verb = keyof typeof VERBS;

const USAGE = `
llmgw ca COMMAND [options]     the cluster CA (on the host of the llmgw-ca worker)

  init                          create the CA (never overwrites one)
  issue --node ID               a node's client certificate and key
  issue-server --name N --host H,...
                                a server certificate and key (e.g. the control plane's)
  crl                           sign and write the current revocation list

Each command takes --help, e.g. llmgw ca issue --help. How identity works: docs/identity.md.
`;

const OPTIONS = {
  dir: { type: 'string' },
  cn: { type: 'string' },
  days: { type: 'string' },
  node: { type: 'string' },
  out: { type: 'string' },
  name: { type: 'string' },
  host: { type: 'string' },
  pem: { type: 'boolean' },
  operator: { type: 'string' },
  gateway: { type: 'string' },
  config: { type: 'string' },
  'mysql-url': { type: 'string' },
} as const;

/** True for a name in the node-id alphabet (operator names share it: both are certificate CNs). */
function isNodeId(name: string): boolean {
  try {
    checkNodeId(name);
    return true;
  } catch {
    return false;
  }
}

/** Which client role `ca issue` was asked for (--operator or --gateway), refusing two identities at once. */
function clientRoleOf(
  values: { node?: string; operator?: string; gateway?: string },
  usage: (msg: string) => UsageError,
): { role: ClientRole; name: string } | null {
  const asked = (['node', 'operator', 'gateway'] as const).filter((k) => values[k] !== undefined);
  if (asked.length > 1)
    throw usage(
      `ca issue takes one of --node ID, --operator NAME, --gateway NAME, not ${asked.map((k) => `--${k}`).join(' and ')}`,
    );
  if (values.operator !== undefined) return { role: 'operator', name: values.operator };
  if (values.gateway !== undefined) return { role: 'gateway', name: values.gateway };
  return null;
}

/** Refuses (before anything is issued) when a bundle's files are already there. */
function assertFree(dir: string, names: string[]): void {
  const there = names.map((n) => join(resolve(dir), n)).filter((p) => existsSync(p));
  if (there.length)
    throw new UsageError(
      `${there.join(', ')} already exist${there.length === 1 ? 's' : ''}: move ${there.length === 1 ? 'it' : 'them'} away or choose another --out`,
    );
}

/** Writes a certificate bundle with its file modes, never replacing a file. */
function writeBundle(dir: string, files: { name: string; content: string; mode: number }[]): string[] {
  const paths = files.map((f) => join(resolve(dir), f.name));
  mkdirSync(resolve(dir), { recursive: true });
  files.forEach((f, i) => {
    writeFileSync(paths[i]!, f.content, { mode: f.mode, flag: 'wx' });
    chmodSync(paths[i]!, f.mode);
  });
  return paths;
}

async function withOperations<T>(
  values: { dir?: string; config?: string; 'mysql-url'?: string },
  fn: (ops: CaOperations) => Promise<T>,
): Promise<T> {
  const mysqlConfig = values['mysql-url'] ? { url: values['mysql-url'] } : loadServerConfig(values.config).mysql;
  const pool = await openConfiguredDatabase(mysqlConfig, 'caWorker');
  try {
    return await fn(createCaOperations({ caDir: values.dir ?? DEFAULT_CA_DIR, store: new Store(pool) }));
  } finally {
    await pool.end();
  }
}

/** Entry for `llmgw ca`. */
export async function caCommand(
  argv: string[],
  out: (s: string) => void = (s) => process.stdout.write(s),
): Promise<void> {
  const [verb, ...rest] = argv;
  const known = verb !== undefined && verb in VERBS;
  const { values } = parse(known ? rest : argv, { usage: known ? VERBS[verb as Verb] : USAGE, options: OPTIONS });
  const usage = (msg: string): UsageError =>
    new UsageError(`${msg}\n\n${known ? VERBS[verb as Verb].trim() : USAGE.trim()}`);
  const days = (fallback: number): number => {
    const n = intOption(values.days, '--days', fallback);
    if (n < 1) throw usage('--days must be at least 1');
    return n;
  };
  switch (verb as Verb | undefined) {
    case 'init': {
      const dir = values.dir ?? DEFAULT_CA_DIR;
      const ca = initCa(dir, { commonName: values.cn, days: days(CA_VALIDITY_DAYS) });
      out(
        `CA created in ${ca.dir}\n  ca.crt  ${ca.cert.subject.getField('CN')?.value as string}, valid until ${ca.notAfter.toISOString()}\n  ca.key  mode 0600 — back it up; it never leaves this host\n`,
      );
      return;
    }
    case 'issue': {
      const client = clientRoleOf(values, usage);
      if (client) {
        const { role, name } = client;
        // Checked before it names a directory too (--operator ../x would write outside .llmgw/certs).
        if (!isNodeId(name))
          throw usage(
            `invalid ${role} name ${quoteInput(name)}: use 2-32 characters of a-z, 0-9 and '-', starting with a letter (it is the certificate's CN), e.g. ${role === 'operator' ? 'ops-alice' : 'gw-1'}`,
          );
        const outDir = values.out ?? join('.llmgw/certs', name);
        assertFree(outDir, [`${role}.crt`, `${role}.key`, 'ca.crt']);
        const c = await withOperations(values, (ops) =>
          ops.issueClientCertificate({ role, name, days: days(DEFAULT_VALIDITY_DAYS) }),
        );
        const paths = writeBundle(outDir, [
          { name: `${role}.crt`, content: c.certPem, mode: 0o644 },
          { name: `${role}.key`, content: c.keyPem, mode: 0o600 },
          { name: 'ca.crt', content: c.caPem, mode: 0o644 },
        ]);
        out(
          `issued ${role} ${c.cn} serial ${c.serial}, valid until ${c.notAfter}\n${paths.map((p) => `  ${p}\n`).join('')}`,
        );
        return;
      }
      if (!values.node)
        throw usage('ca issue needs --node ID (or --operator NAME, --gateway NAME), e.g. llmgw ca issue --node gpu-01');
      const node = checkNodeId(values.node);
      const outDir = values.out ?? join('.llmgw/certs', node);
      assertFree(outDir, ['node.crt', 'node.key', 'ca.crt']);
      const c = await withOperations(values, (ops) =>
        ops.issueNodeCertificate({ nodeId: node, days: days(DEFAULT_VALIDITY_DAYS) }),
      );
      const paths = writeBundle(outDir, [
        { name: 'node.crt', content: c.certPem, mode: 0o644 },
        { name: 'node.key', content: c.keyPem, mode: 0o600 },
        { name: 'ca.crt', content: c.caPem, mode: 0o644 },
      ]);
      out(
        `issued ${c.cn} serial ${c.serial}, valid until ${c.notAfter} (renew from ${c.renewAt})\n${paths.map((p) => `  ${p}\n`).join('')}`,
      );
      return;
    }
    case 'issue-server': {
      if (!values.name || !values.host)
        throw usage(
          'ca issue-server needs --name NAME and --host H,..., e.g. --name control-plane --host 127.0.0.1,localhost',
        );
      const { name } = values;
      const hosts = values.host
        .split(',')
        .map((h) => h.trim())
        .filter(Boolean);
      const outDir = values.out ?? join('.llmgw/certs', name);
      assertFree(outDir, ['server.crt', 'server.key', 'ca.crt']);
      const c = await withOperations(values, (ops) =>
        ops.issueServerCertificate({ name, hosts, days: days(DEFAULT_VALIDITY_DAYS) }),
      );
      const paths = writeBundle(outDir, [
        { name: 'server.crt', content: c.certPem, mode: 0o644 },
        { name: 'server.key', content: c.keyPem, mode: 0o600 },
        { name: 'ca.crt', content: c.caPem, mode: 0o644 },
      ]);
      out(
        `issued server ${c.cn} for ${hosts.join(', ')} serial ${c.serial}, valid until ${c.notAfter}\n${paths.map((p) => `  ${p}\n`).join('')}`,
      );
      return;
    }
    case 'crl': {
      const crl = await withOperations(values, (ops) => ops.currentCrl());
      out(
        `CRL #${crl.number}: ${crl.revoked} revoked certificate${crl.revoked === 1 ? '' : 's'}, next update ${crl.nextUpdate} (publish a new one by ${crl.refreshAt})\n  written to ${join(resolve(values.dir ?? DEFAULT_CA_DIR), 'crl.pem')}\n`,
      );
      if (values.pem) out(crl.pem);
      return;
    }
    default:
      throw new UsageError(
        verb ? `unknown command "ca ${verb}"\n${USAGE}` : `ca needs a COMMAND, e.g. llmgw ca init\n${USAGE}`,
      );
  }
}
