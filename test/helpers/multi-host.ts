/**
 * llmgw on several hosts, as docs/deploying.md lays it out, each host a network namespace with its own address on one
 * test network (test-host.ts): Temporal (the dev server) behind a TLS terminator that requires client certificates;
 * MySQL (a private mariadbd) with a user per role; two control planes; two gateways behind a load balancer (HAProxy
 * with health checks and retries); two sim nodes (real agents, the sim engine). Temporal's and MySQL's hosts answer
 * only the hosts that need them (policy routing: RoleHost.allowOnly); the nodes reach the control planes and their
 * Temporal doors, nothing else. This machine (the network's .1) is the operator: it migrates, issues certificates and
 * sends the load.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Connection } from '@temporalio/client';
import mysql from 'mysql2/promise';
import { stringify } from 'yaml';
import { startTemporalDev, type DevServer } from '../../cli/cluster/temporal-dev';
import { DEFAULT_CONFIG } from '../../config/defaults';
import type { ServerConfig } from '../../config/types';
import { initCa, issueOperatorCertificate, issueServerCertificate, type Ca } from '../../lib/pki';
import { stopProcess } from '../../lib/process';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import type { ModelSpec } from '../../lib/types';
import { loadBalancerConfig, startHaproxy, tcpForwardConfig, tlsTerminatorConfig, type Haproxy } from './haproxy';
import { llmgw } from './cli';
import { agentCertFlags, spawnAgent, spawnLlmgw, untilLogged, type AgentProc, type LlmgwProc } from './llmgw-process';
import { startPrivateMariadb, type PrivateMariadb } from './private-mariadb';
import { startTestNetwork, type RoleHost, type TestNetwork } from './test-host';
import { TEST_API_KEY } from './test-key';
import { writeGatewayCert, writeOperatorCert } from './tls';
import { waitFor } from './wait';

/** Ports: each host has a port space of its own, so the well-known ones. */
export const PORTS = {
  temporalTls: 7233,
  temporalPlain: 7234,
  /** the dev server, on the Temporal host's loopback */
  temporalDev: 7235,
  mysql: 3306,
  control: 7443,
  door: 7444,
  gateway: 8080,
  lb: 8080,
} as const;

const CP_NAMES = ['cp1', 'cp2'] as const;
const GW_NAMES = ['gw1', 'gw2'] as const;
export type CpName = (typeof CP_NAMES)[number];
export type GwName = (typeof GW_NAMES)[number];

/** Temporal on its host: what roles are given, and what a client needs to pass the terminator. */
export interface TemporalHost {
  dev: DevServer;
  terminator: Haproxy;
  /** host:port of the terminator (TLS, client certificate required) */
  tlsAddress: string;
  /** host:port of the plaintext forward to the dev server: used by its start check only, closed after */
  plainAddress: string;
  /** Temporal's CA (its server certificate's) and a client certificate of it */
  caPem: string;
  client: { certPem: string; keyPem: string };
  /** The `temporal` section of a role's server.yaml. */
  roleSettings(): ServerConfig['temporal'];
}

/**
 * Temporal on `host`: the dev server on the host's loopback, and HAProxy in front of it on the host's address,
 * terminating TLS with a server certificate of a CA of Temporal's own (as a production Temporal has), client
 * certificates of that CA required. The roles reach it there with temporal.tls (and a client certificate of their
 * own). A plaintext forward serves only the dev server's start check, and is closed before any role starts.
 */
async function startTemporalHost(host: RoleHost, dir: string): Promise<TemporalHost> {
  const ca = initCa(join(dir, 'temporal-ca'), { keyBits: 2048 });
  const server = issueServerCertificate(ca, 'temporal', [host.address, 'temporal']);
  const client = issueOperatorCertificate(ca, 'llmgw');
  const pemFile = join(dir, 'temporal-server.pem');
  writeFileSync(pemFile, `${server.certPem}\n${server.keyPem}`, { mode: 0o600 });
  const clientCert = join(dir, 'temporal-client.crt');
  const clientKey = join(dir, 'temporal-client.key');
  writeFileSync(clientCert, client.certPem);
  writeFileSync(clientKey, client.keyPem, { mode: 0o600 });
  const dev = `127.0.0.1:${PORTS.temporalDev}`;
  const tlsAddress = `${host.address}:${PORTS.temporalTls}`;
  const plainAddress = `${host.address}:${PORTS.temporalPlain}`;
  const terminator = await startHaproxy(
    host,
    join(dir, 'terminator'),
    [
      tlsTerminatorConfig({
        name: 'temporal_tls',
        listen: tlsAddress,
        upstream: dev,
        pemFile,
        caFile: join(ca.dir, 'ca.crt'),
      }),
      tcpForwardConfig({ name: 'temporal_plain', listen: plainAddress, upstream: dev }),
    ].join('\n'),
  );
  const devServer = await startTemporalDev({
    port: PORTS.temporalDev,
    netns: host.ns,
    reachAt: plainAddress,
    uiPort: null,
    dbFile: null,
    startTimeoutMs: 180_000,
  }).catch(async (err: unknown) => {
    await terminator.stop();
    throw err;
  });
  // Up: from now on TLS with a client certificate is the only way in.
  await terminator.command('disable frontend temporal_plain_in');
  return {
    dev: devServer,
    terminator,
    tlsAddress,
    plainAddress,
    caPem: ca.certPem,
    client: { certPem: client.certPem, keyPem: client.keyPem },
    roleSettings: () => ({
      ...DEFAULT_CONFIG.temporal,
      address: tlsAddress,
      tls: { ca: join(ca.dir, 'ca.crt'), clientCert, clientKey, serverName: 'temporal' },
    }),
  };
}

/** A client through the terminator, with Temporal's client certificate (or without one: `noCert`). */
export function connectThroughTerminator(t: TemporalHost, o: { noCert?: boolean } = {}): Promise<Connection> {
  return Connection.connect({
    address: t.tlsAddress,
    connectTimeout: 5000,
    tls: {
      serverNameOverride: 'temporal',
      serverRootCACertificate: Buffer.from(t.caPem),
      ...(o.noCert
        ? {}
        : { clientCertPair: { crt: Buffer.from(t.client.certPem), key: Buffer.from(t.client.keyPem) } }),
    },
  });
}

/** The MySQL users made here: the operator's (`llmgw db migrate`, the test's own reads) and one per role. */
export type DbUser = 'migrate' | 'controlPlane' | 'gateway';

/**
 * Gives `role` a MySQL user of its own, allowed from `hosts` only, with exactly the grants `llmgw db grants ROLE`
 * prints (run as root through the socket, as an operator pipes them into mysql); resolves with its mysql.url. The
 * migrate user comes first (its grant is on the database); the roles' after `llmgw db migrate` (theirs are on tables).
 */
async function grantRole(
  db: PrivateMariadb,
  dir: string,
  database: string,
  role: DbUser,
  hosts: string[],
): Promise<string> {
  const user = `llmgw_${role.toLowerCase()}`;
  const password = `pw-${role}-${Math.random().toString(36).slice(2)}`;
  const passwordFile = join(dir, `${user}.password`);
  writeFileSync(passwordFile, password, { mode: 0o600 });
  const c = await mysql.createConnection({ socketPath: db.socket, user: 'root', multipleStatements: true });
  try {
    for (const host of hosts) {
      const args = ['db', 'grants', role, '--user', user, '--host', host, '--database', database];
      const r = await llmgw([...args, '--password-file', passwordFile], 120_000);
      if (r.code !== 0) throw new Error(`llmgw ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
      await c.query(r.stdout);
    }
  } finally {
    await c.end();
  }
  return `mysql://${user}:${encodeURIComponent(password)}@${db.url.split('@')[1]}`;
}

/** A role process on its host. */
export interface RoleProc {
  host: RoleHost;
  proc: LlmgwProc;
  file: string;
}

export interface MultiHost {
  lan: TestNetwork;
  hosts: Record<'temporal' | 'mysql' | CpName | GwName | 'lb' | 'nodeA' | 'nodeB', RoleHost>;
  temporal: TemporalHost;
  mysql: PrivateMariadb;
  /** the operator's view of the database (the migrate user) */
  store: Store;
  /** server.yaml of the operator (`llmgw db migrate`, `llmgw ctl`) */
  operatorFile: string;
  controlPlanes: Record<CpName, RoleProc>;
  gateways: Record<GwName, RoleProc>;
  lb: Haproxy;
  /** http://LB:8080: the inference API behind the load balancer */
  lbUrl: string;
  /** https://CP:7443 of each control plane */
  cpUrls: Record<CpName, string>;
  agents: AgentProc[];
  /** The last `n` lines of every role process (control planes, gateways, agents), for a failure's message. */
  tails(n?: number): string;
  /** Starts a role again (after a test killed it) with its server.yaml; resolves once it serves. */
  restart(name: CpName | GwName): Promise<RoleProc>;
  close(): Promise<void>;
}

/** Brings every host up, in order: Temporal, MySQL (migrated), control planes, gateways, the load balancer, the nodes. */
export async function startMultiHost(o: { catalog: ModelSpec[]; say?: (s: string) => void }): Promise<MultiHost> {
  const say = o.say ?? ((): void => undefined);
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-multihost-'));
  const lan = await startTestNetwork();
  const made: { stop(): Promise<void> }[] = [];
  try {
    const host = (name: string): Promise<RoleHost> => lan.startRoleHost(name);
    const hosts = {
      temporal: await host('temporal'),
      mysql: await host('mysql'),
      cp1: await host('cp1'),
      cp2: await host('cp2'),
      gw1: await host('gw1'),
      gw2: await host('gw2'),
      lb: await host('lb'),
      nodeA: await host('node-a'),
      nodeB: await host('node-b'),
    };
    const operator = lan.gateway;
    const cpAddrs = CP_NAMES.map((n) => hosts[n].address);
    const gwAddrs = GW_NAMES.map((n) => hosts[n].address);
    // The firewall table of docs/deploying.md: Temporal answers the control planes (and the operator), MySQL the
    // control planes and gateways (and the operator); the nodes reach neither.
    await hosts.temporal.allowOnly([...cpAddrs, operator]);
    await hosts.mysql.allowOnly([...cpAddrs, ...gwAddrs, operator]);

    say(`temporal on ${hosts.temporal.address}`);
    const temporal = await startTemporalHost(hosts.temporal, dir);
    made.push({ stop: () => temporal.terminator.stop() }, { stop: () => temporal.dev.stop() });
    say(`mysql on ${hosts.mysql.address}`);
    const db = await startPrivateMariadb(join(dir, 'mysql'), 'llmgw', {
      bind: hosts.mysql.address,
      port: PORTS.mysql,
      spawn: hosts.mysql.spawn,
    });
    made.push(db);
    const urls = {
      migrate: await grantRole(db, dir, 'llmgw', 'migrate', [operator]),
    } as Record<DbUser, string>;

    // The cluster CA (tls.ca with ca.key beside it: the control planes sign renewals in process).
    const caDir = join(dir, 'ca');
    const ca: Ca = initCa(caDir, { keyBits: 2048 });
    const base: ServerConfig = {
      ...DEFAULT_CONFIG,
      temporal: temporal.roleSettings(),
      mysql: { url: urls.migrate, autoMigrate: false },
      tls: {
        ca: join(caDir, 'ca.crt'),
        serverCert: join(dir, 'unused-server.crt'),
        serverKey: join(dir, 'unused-server.key'),
        clientCert: join(dir, 'operator.crt'),
        clientKey: join(dir, 'operator.key'),
        gatewayCert: join(dir, 'gateway.crt'),
        gatewayKey: join(dir, 'gateway.key'),
      },
      gateway: { ...DEFAULT_CONFIG.gateway, apiKeys: [TEST_API_KEY] },
      enginePorts: { base: 22000, count: 100 },
      catalog: o.catalog,
    };
    const operatorFile = join(dir, 'operator.yaml');
    writeFileSync(
      operatorFile,
      stringify({
        ...base,
        listeners: {
          ...base.listeners,
          controlPlane: { host: hosts.cp1.address, port: PORTS.control },
        },
      }),
    );
    say('llmgw db migrate (the operator, as the migrate user)');
    const migrated = await llmgw(['db', 'migrate', '--config', operatorFile], 120_000);
    if (migrated.code !== 0) throw new Error(`llmgw db migrate failed (${migrated.code}): ${migrated.stderr}`);
    urls.controlPlane = await grantRole(db, dir, 'llmgw', 'controlPlane', cpAddrs);
    urls.gateway = await grantRole(db, dir, 'llmgw', 'gateway', gwAddrs);
    const pool = await openDatabase(urls.migrate);
    made.push({ stop: () => pool.end() });
    const store = new Store(pool);
    await writeOperatorCert(base, store);
    await writeGatewayCert(base, store);

    const files: Record<string, string> = {};
    const cpUrls = {} as Record<CpName, string>;
    for (const n of CP_NAMES) {
      const a = hosts[n].address;
      const server = issueServerCertificate(ca, `control-plane-${n}`, [a]);
      writeFileSync(join(dir, `${n}.crt`), server.certPem);
      writeFileSync(join(dir, `${n}.key`), server.keyPem, { mode: 0o600 });
      const config: ServerConfig = {
        ...base,
        mysql: { url: urls.controlPlane, autoMigrate: false },
        listeners: {
          ...base.listeners,
          controlPlane: { host: a, port: PORTS.control },
          temporalDoor: { host: a, port: PORTS.door },
        },
        tls: { ...base.tls, serverCert: join(dir, `${n}.crt`), serverKey: join(dir, `${n}.key`) },
      };
      files[n] = join(dir, `${n}.yaml`);
      writeFileSync(files[n], stringify(config));
      cpUrls[n] = `https://${a}:${PORTS.control}`;
    }
    for (const n of GW_NAMES) {
      const config: ServerConfig = {
        ...base,
        mysql: { url: urls.gateway, autoMigrate: false },
        listeners: { ...base.listeners, gateway: { host: hosts[n].address, port: PORTS.gateway } },
        // Routes pushed by either control plane (with the gateway certificate); MySQL while neither answers.
        gateway: { ...base.gateway, controlPlanes: CP_NAMES.map((c) => cpUrls[c]) },
      };
      files[n] = join(dir, `${n}.yaml`);
      writeFileSync(files[n], stringify(config));
    }

    const procs: LlmgwProc[] = [];
    const named: [string, LlmgwProc][] = [];
    const start = async (n: CpName | GwName): Promise<RoleProc> => {
      const file = files[n] as string;
      const cp = n.startsWith('cp');
      const proc = spawnLlmgw([cp ? 'control-plane' : 'gateway', '--config', file], {}, hosts[n].spawn);
      procs.push(proc);
      named.push([n, proc]);
      // A control plane bundles the workflows at start: tens of seconds of CPU on a loaded machine.
      await untilLogged(proc, cp ? 'control plane listening' : 'gateway listening', 240_000, `${n} to listen`);
      return { host: hosts[n], proc, file };
    };
    made.push({
      stop: async () => {
        await Promise.all(procs.map((p) => stopProcess(p.child, 10_000)));
      },
    });
    const controlPlanes = {} as Record<CpName, RoleProc>;
    const gateways = {} as Record<GwName, RoleProc>;
    // One after the other: the second joins what the first started (catalog, deployments) and the CPU is shared.
    for (const n of CP_NAMES) {
      say(`control plane ${n} on ${hosts[n].address}`);
      controlPlanes[n] = await start(n);
    }
    for (const n of GW_NAMES) {
      say(`gateway ${n} on ${hosts[n].address}`);
      gateways[n] = await start(n);
    }
    say(`load balancer on ${hosts.lb.address}`);
    const lb = await startHaproxy(
      hosts.lb,
      join(dir, 'lb'),
      loadBalancerConfig({
        listen: `${hosts.lb.address}:${PORTS.lb}`,
        servers: Object.fromEntries(GW_NAMES.map((n) => [n, `${hosts[n].address}:${PORTS.gateway}`])),
      }),
    );
    made.push(lb);
    await waitFor(
      async () => (await Promise.all(GW_NAMES.map((n) => lb.serverStatus('gateways', n)))).every((s) => s === 'UP'),
      { timeoutMs: 30_000, what: 'both gateways UP at the load balancer' },
    );

    const agents: AgentProc[] = [];
    made.push({ stop: async () => void (await Promise.all(agents.map((a) => stopProcess(a.child, 20_000)))) });
    for (const [n, h] of [
      ['node-a', hosts.nodeA],
      ['node-b', hosts.nodeB],
    ] as const) {
      say(`agent ${n} on ${h.address}`);
      const state = join(dir, 'nodes', n);
      mkdirSync(state, { recursive: true });
      agents.push(
        await spawnAgent(
          n,
          [
            '--server',
            CP_NAMES.map((c) => cpUrls[c]).join(','),
            ...(await agentCertFlags(dir, base, store, n)),
            '--advertise-host',
            h.address,
            '--weights-listen',
            `${h.address}:0`,
            '--state-dir',
            join(state, 'engines'),
            '--weights-dir',
            join(state, 'weights'),
            '--stop-engines-on-exit',
          ],
          { spawner: h.spawn },
        ),
      );
    }

    return {
      lan,
      hosts,
      temporal,
      mysql: db,
      store,
      operatorFile,
      controlPlanes,
      gateways,
      lb,
      lbUrl: `http://${hosts.lb.address}:${PORTS.lb}`,
      cpUrls,
      agents,
      restart: async (n) => {
        const r = await start(n);
        if (n.startsWith('cp')) controlPlanes[n as CpName] = r;
        else gateways[n as GwName] = r;
        return r;
      },
      tails: (lines = 15) =>
        [...named, ...agents.map((a): [string, LlmgwProc] => [a.node, a])]
          .map(
            ([n, p]) =>
              `--- ${n} (exit ${p.child.exitCode ?? p.child.signalCode}):\n${p.lines.slice(-lines).join('\n')}`,
          )
          .join('\n'),
      close: async () => {
        for (const m of made.reverse()) await m.stop().catch(() => undefined);
        await lan.close().catch(() => undefined);
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    for (const m of made.reverse()) await m.stop().catch(() => undefined);
    await lan.close().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

/** What a TCP connect from `host` to `address` (host:port) met: 'connected', or the error code (EHOSTUNREACH, …). */
export async function tryConnect(host: RoleHost, address: string, timeoutMs = 15_000): Promise<string> {
  const i = address.lastIndexOf(':');
  const script = [
    `const s = require('net').connect({ host: ${JSON.stringify(address.slice(0, i))}, port: ${address.slice(i + 1)} });`,
    `s.setTimeout(${timeoutMs}, () => { console.log('TIMEOUT'); process.exit(0); });`,
    `s.on('connect', () => { console.log('connected'); process.exit(0); });`,
    `s.on('error', (e) => { console.log(e.code || e.message); process.exit(0); });`,
  ].join('\n');
  const child = host.spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (b: Buffer) => void (out += b.toString()));
  child.stderr?.on('data', (b: Buffer) => void (out += b.toString()));
  await new Promise((r) => child.on('close', r));
  return out.trim();
}
