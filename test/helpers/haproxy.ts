/**
 * HAProxy (Debian's package; scripts/setup.sh installs it) on a test host, in the two parts a multi-host llmgw puts
 * in front of its servers: a TLS terminator that requires a client certificate of the cluster CA (in front of
 * Temporal, as a production Temporal is reached), and an HTTP load balancer with active health checks and retries
 * over the gateways. Read back through its admin socket (`show stat`).
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { stopProcess } from '../../lib/process';
import type { RoleHost } from './test-host';
import { waitFor } from './wait';

const HAPROXY = '/usr/sbin/haproxy';

/** A running haproxy. */
export interface Haproxy {
  child: ChildProcess;
  /** `show stat` of the admin socket: one row per frontend, backend and server (pxname, svname, status, …) */
  stats(): Promise<Record<string, string>[]>;
  /** Runs one command of the admin socket (e.g. `disable frontend NAME`); resolves with its answer. */
  command(line: string): Promise<string>;
  /** Status (UP, DOWN, …) of server `name` in `backend`. */
  serverStatus(backend: string, name: string): Promise<string | undefined>;
  stop(): Promise<void>;
}

/**
 * A TLS terminator `name`: TLS on `listen` (server certificate and key in `pemFile`), client certificates of `caFile`
 * required; TCP to `upstream`.
 */
export function tlsTerminatorConfig(o: {
  name: string;
  listen: string;
  upstream: string;
  pemFile: string;
  caFile: string;
}): string {
  return [
    `frontend ${o.name}_in`,
    '  mode tcp',
    // gRPC over HTTP/2 inside: ALPN h2, as Temporal's own frontend offers it.
    `  bind ${o.listen} ssl crt ${o.pemFile} ca-file ${o.caFile} verify required alpn h2`,
    `  default_backend ${o.name}_out`,
    `backend ${o.name}_out`,
    '  mode tcp',
    `  server upstream ${o.upstream}`,
  ].join('\n');
}

/** A plain TCP forward `name` from `listen` to `upstream`. */
export function tcpForwardConfig(o: { name: string; listen: string; upstream: string }): string {
  return [
    `frontend ${o.name}_in`,
    '  mode tcp',
    `  bind ${o.listen}`,
    `  default_backend ${o.name}_out`,
    `backend ${o.name}_out`,
    '  mode tcp',
    `  server upstream ${o.upstream}`,
  ].join('\n');
}

/**
 * An HTTP load balancer on `listen` over `servers` (name -> host:port): health checks of GET /health every 500 ms
 * (a server is DOWN after 2 failures, UP after 2 passes); a request whose server refused the connection, or closed
 * it without an answer (a gateway killed with the request in it), is sent again to another server (L7 retries, the
 * body buffered first so it can be).
 */
export function loadBalancerConfig(o: { listen: string; servers: Record<string, string> }): string {
  return [
    'frontend http_in',
    '  mode http',
    `  bind ${o.listen}`,
    '  default_backend gateways',
    'backend gateways',
    '  mode http',
    '  balance roundrobin',
    '  option http-buffer-request',
    '  option httpchk GET /health',
    '  http-check expect status 200',
    '  retry-on conn-failure empty-response response-timeout',
    '  retries 3',
    '  option redispatch 1',
    '  timeout connect 1s',
    '  default-server inter 500 fall 2 rise 2',
    ...Object.entries(o.servers).map(([name, addr]) => `  server ${name} ${addr} check`),
  ].join('\n');
}

/** Starts haproxy on `host` with `sections` (frontends and backends) under a global part of the test's own, in `dir`. */
export async function startHaproxy(host: RoleHost, dir: string, sections: string): Promise<Haproxy> {
  if (!existsSync(HAPROXY)) throw new Error(`${HAPROXY} is missing: run bash scripts/setup.sh (it installs haproxy)`);
  mkdirSync(dir, { recursive: true });
  const sock = join(dir, 'admin.sock');
  const cfg = join(dir, 'haproxy.cfg');
  writeFileSync(
    cfg,
    [
      'global',
      `  stats socket ${sock} mode 600 level admin`,
      '  maxconn 2000',
      'defaults',
      '  timeout connect 2s',
      '  timeout client 1h',
      '  timeout server 1h',
      '  timeout check 1s',
      sections,
      '',
    ].join('\n'),
  );
  const check = host.spawn(HAPROXY, ['-c', '-q', '-f', cfg], { stdio: 'pipe' });
  let checkOut = '';
  check.stderr?.on('data', (b: Buffer) => void (checkOut += b.toString()));
  check.stdout?.on('data', (b: Buffer) => void (checkOut += b.toString()));
  const code = await new Promise<number | null>((r) => check.on('close', r));
  if (code !== 0) throw new Error(`haproxy refused ${cfg} (${code}): ${checkOut}\n${readFileSync(cfg, 'utf8')}`);
  // -db: foreground, no daemon; its parent (this test) stops it.
  const child = host.spawn(HAPROXY, ['-db', '-f', cfg], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr?.on('data', (b: Buffer) => void (err = (err + b.toString()).slice(-4000)));
  const command = (line: string): Promise<string> =>
    new Promise((resolve, reject) => {
      let out = '';
      const c = connect(sock, () => c.end(`${line}\n`));
      c.on('data', (b: Buffer) => void (out += b.toString()));
      c.on('error', reject);
      c.on('close', () => resolve(out));
    });
  const stats = async (): Promise<Record<string, string>[]> => {
    const [head, ...rows] = (await command('show stat')).trim().split('\n');
    const keys = (head ?? '').replace(/^# /, '').split(',');
    return rows.map((r) => Object.fromEntries(r.split(',').map((v, i) => [keys[i] ?? String(i), v])));
  };
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`haproxy exited ${child.exitCode}: ${err}`);
      return (await stats()).length > 0;
    },
    { timeoutMs: 20_000, what: `haproxy on ${host.name} to answer on ${sock}` },
  );
  return {
    child,
    stats,
    command,
    serverStatus: async (backend, name) =>
      (await stats()).find((r) => r.pxname === backend && r.svname === name)?.status,
    stop: () => stopProcess(child, 5000),
  };
}
