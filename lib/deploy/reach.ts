/**
 * What a role's host can reach, as `llmgw init ROLE` checks it: Temporal's frontend, MySQL (a login, not only the
 * port), the Proxmox API, and the files the role reads at start. Each check ends ok or with what failed and the fix.
 */
import { accessSync, constants } from 'node:fs';
import { connect } from 'node:net';
import type { ServerConfig } from '../../config/types';
import type { InitRole } from './server-yaml';

/** One line of the table. */
export interface Reach {
  /** what was checked, e.g. "temporal.address" */
  what: string;
  /** where: host:port, a file */
  target: string;
  ok: boolean;
  /** "port open", "logged in as llmgw_gateway", or the error */
  detail: string;
  /** what to do when not ok */
  fix: string;
}

/** Opens a TCP connection to host:port and closes it: null when it opened, else the reason. */
export function tcpOpen(host: string, port: number, timeoutMs: number): Promise<string | null> {
  return new Promise((done) => {
    const s = connect({ host, port });
    const end = (why: string | null): void => {
      s.destroy();
      done(why);
    };
    s.setTimeout(timeoutMs, () => end(`no answer in ${timeoutMs} ms`));
    s.once('connect', () => end(null));
    s.once('error', (err: NodeJS.ErrnoException) => end(err.code ?? err.message));
  });
}

/** host:port of an address ("[::1]:7233" and "temporal:7233" alike). */
function hostPort(address: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(address);
  return { host: (m?.[1] ?? m?.[2] ?? address) as string, port: Number(m?.[3] ?? 0) };
}

const FIREWALL = 'and that the firewall lets this host through (docs/deploying.md, "Firewall")';

async function temporalReach(config: ServerConfig, timeoutMs: number): Promise<Reach> {
  const { host, port } = hostPort(config.temporal.address);
  const why = await tcpOpen(host, port, timeoutMs);
  return {
    what: 'temporal.address',
    target: config.temporal.address,
    ok: why === null,
    detail: why === null ? 'port open' : `unreachable (${why})`,
    fix: `check that Temporal's frontend listens at ${config.temporal.address} ${FIREWALL}`,
  };
}

async function mysqlReach(config: ServerConfig, timeoutMs: number): Promise<Reach> {
  // The driver is loaded here: a role that reads no MySQL never loads it.
  // eslint-disable-next-line @typescript-eslint/no-require-imports, @typescript-eslint/consistent-type-imports
  const { parseMysqlUrl, tlsOptions } = require('../store/db') as typeof import('../store/db');
  // eslint-disable-next-line @typescript-eslint/no-require-imports, @typescript-eslint/consistent-type-imports
  const mysql = require('mysql2/promise') as typeof import('mysql2/promise');
  const { options, database } = parseMysqlUrl(config.mysql.url);
  const target = `${options.host}:${options.port}/${database}`;
  const base = { what: 'mysql.url', target };
  const why = await tcpOpen(options.host as string, options.port as number, timeoutMs);
  if (why !== null)
    return {
      ...base,
      ok: false,
      detail: `unreachable (${why})`,
      fix: `check that MySQL listens at ${options.host}:${options.port} ${FIREWALL}`,
    };
  try {
    // Over TLS as the role connects when mysql.tls is set (a server with require_secure_transport refuses plain TCP).
    const tls = config.mysql.tls ? tlsOptions(config.mysql.tls, options.host as string, options.port as number) : {};
    const c = await mysql.createConnection({ ...options, database, connectTimeout: timeoutMs, ...tls });
    await c.query('SELECT 1');
    await c.end();
    return { ...base, ok: true, detail: `logged in as ${options.user}`, fix: '' };
  } catch (err) {
    const e = err as Error & { code?: string };
    return {
      ...base,
      ok: false,
      detail: `port open, but ${e.code ?? 'error'}: ${e.message}`,
      fix:
        e.code === 'ER_BAD_DB_ERROR'
          ? `create it: llmgw db migrate --config FILE (as a user allowed to create ${database})`
          : `give ${options.user} a password and grants on ${database} (docs/deploying.md, "MySQL"), or correct mysql.url`,
    };
  }
}

async function proxmoxReach(config: ServerConfig, timeoutMs: number): Promise<Reach> {
  const url = new URL(config.proxmox?.url ?? 'https://unset');
  const port = Number(url.port || 443);
  const why = await tcpOpen(url.hostname, port, timeoutMs);
  return {
    what: 'proxmox.url',
    target: `${url.hostname}:${port}`,
    ok: why === null,
    detail: why === null ? 'port open' : `unreachable (${why})`,
    fix: `check that the Proxmox API answers at ${config.proxmox?.url ?? '(unset)'} ${FIREWALL}`,
  };
}

/** A file the role reads at start: readable by this process, or why not and where it comes from. */
function fileReach(what: string, file: string, from: string): Reach {
  try {
    accessSync(file, constants.R_OK);
    return { what, target: file, ok: true, detail: 'readable', fix: '' };
  } catch (err) {
    return {
      what,
      target: file,
      ok: false,
      detail: `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`,
      fix: `${from}; the role's user must be able to read it`,
    };
  }
}

/** The gateway certificate's files: what a gateway and a control plane present at the nodes' doors. */
function gatewayCertReach(config: ServerConfig): Reach[] {
  return [
    fileReach(
      'tls.gatewayCert',
      config.tls.gatewayCert,
      "llmgw ca issue --gateway NAME on the CA host, then copy it here (a node's door takes only a gateway certificate)",
    ),
    fileReach('tls.gatewayKey', config.tls.gatewayKey, 'it is written beside the certificate by llmgw ca issue'),
  ];
}

/** Every check of a role, in the order of its start. */
export async function checkRole(role: InitRole, config: ServerConfig, timeoutMs = 3000): Promise<Reach[]> {
  switch (role) {
    case 'control-plane':
      return [
        fileReach('tls.ca', config.tls.ca, "copy the CA host's ca.crt here (llmgw ca init made it)"),
        fileReach(
          'tls.serverCert',
          config.tls.serverCert,
          'llmgw ca issue-server --name control-plane --host HOSTS on the CA host, then copy it here',
        ),
        fileReach(
          'tls.serverKey',
          config.tls.serverKey,
          'it is written beside the certificate by llmgw ca issue-server',
        ),
        ...gatewayCertReach(config),
        await temporalReach(config, timeoutMs),
        await mysqlReach(config, timeoutMs),
      ];
    case 'gateway':
      return [
        fileReach('tls.ca', config.tls.ca, "copy the CA host's ca.crt here (llmgw ca init made it)"),
        ...gatewayCertReach(config),
        await mysqlReach(config, timeoutMs),
      ];
    case 'ca-worker':
      return [await temporalReach(config, timeoutMs), await mysqlReach(config, timeoutMs)];
    case 'proxmox-worker':
      return [
        fileReach(
          'proxmox.tokenSecretFile',
          config.proxmox?.tokenSecretFile ?? '(unset)',
          "write the API token's secret there (Datacenter > Permissions > API Tokens)",
        ),
        fileReach('proxmox.ca', config.proxmox?.ca ?? '(unset)', "copy the Proxmox host's /etc/pve/pve-root-ca.pem"),
        await temporalReach(config, timeoutMs),
        await proxmoxReach(config, timeoutMs),
      ];
    default: {
      const never: never = role;
      return never;
    }
  }
}
