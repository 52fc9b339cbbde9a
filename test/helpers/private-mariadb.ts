/**
 * A MariaDB server of a test's own — its own datadir, port and socket — that the test may kill and start again
 * (a MySQL outage) without touching the machine's shared server. Root with an empty password, loopback only; or,
 * on a test host of its own (`spawn`, `bind`), listening on that host's address, where root is reached through the
 * socket only and the roles with users of their own.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createConnection } from 'mysql2/promise';
import { stopProcess } from '../../lib/process';
import { freePort } from './ports';
import { waitFor } from './wait';

/** A running private MariaDB. */
export interface PrivateMariadb {
  /** mysql://root@127.0.0.1:PORT/DB for llmgw's server.yaml */
  url: string;
  port: number;
  /** its unix socket: root@localhost from this machine, whatever network namespace the server is in */
  socket: string;
  /** SIGKILL: what an outage looks like to its clients (connections refused until start()). */
  kill(): void;
  /** Starts it again on the same datadir and port; resolves once it answers. */
  start(): Promise<void>;
  stop(): Promise<void>;
}

const MARIADBD = ['/usr/sbin/mariadbd', '/usr/sbin/mysqld'].find((p) => existsSync(p)) ?? 'mariadbd';

/** A private server's TLS: PEM files; with `require`, plain TCP connections are refused (require_secure_transport). */
export interface PrivateMariadbTls {
  ca: string;
  cert: string;
  key: string;
  require?: boolean;
}

/** Initialises a datadir under `dir` and starts a server on a free port; `database` is created. */
export async function startPrivateMariadb(
  dir: string,
  database = 'llmgw',
  o: {
    tls?: PrivateMariadbTls;
    /** the address it listens on (default 127.0.0.1) */
    bind?: string;
    port?: number;
    /** how the server is started, e.g. a RoleHost's spawn (in its network namespace); default node's spawn */
    spawn?: (command: string, args: string[], o: SpawnOptions) => ChildProcess;
  } = {},
): Promise<PrivateMariadb> {
  const datadir = join(dir, 'data');
  mkdirSync(dir, { recursive: true });
  const user = process.getuid?.() === 0 ? 'root' : (process.env.USER ?? 'root');
  const init = spawnSync(
    'mariadb-install-db',
    [
      '--no-defaults',
      `--datadir=${datadir}`,
      `--user=${user}`,
      '--auth-root-authentication-method=normal',
      '--skip-test-db',
    ],
    { encoding: 'utf8' },
  );
  if (init.status !== 0) throw new Error(`mariadb-install-db failed (${init.status}): ${init.stderr || init.stdout}`);
  const port = o.port ?? (await freePort());
  const bind = o.bind ?? '127.0.0.1';
  const socket = join(dir, 'sock');
  let child: ChildProcess | null = null;
  const start = async (): Promise<void> => {
    child = (o.spawn ?? spawn)(
      MARIADBD,
      [
        '--no-defaults',
        `--datadir=${datadir}`,
        `--port=${port}`,
        `--bind-address=${bind}`,
        `--socket=${socket}`,
        `--pid-file=${join(dir, 'pid')}`,
        `--user=${user}`,
        '--skip-log-bin',
        '--innodb-buffer-pool-size=32M',
        ...(o.tls ? [`--ssl-ca=${o.tls.ca}`, `--ssl-cert=${o.tls.cert}`, `--ssl-key=${o.tls.key}`] : []),
        ...(o.tls?.require ? ['--require-secure-transport=ON'] : []),
        // On a test host, users are named by address: no reverse lookup of each client (with no DNS on a test
        // network, it stalls logins).
        ...(bind === '127.0.0.1' ? [] : ['--skip-name-resolve']),
      ],
      { stdio: 'ignore' },
    );
    await waitFor(
      async () => {
        const c = await createConnection({
          ...(bind === '127.0.0.1' ? { host: bind, port } : { socketPath: socket }),
          user: 'root',
          ...(o.tls ? { ssl: { ca: readFileSync(o.tls.ca, 'utf8') } } : {}),
        });
        await c.query(`CREATE DATABASE IF NOT EXISTS \`${database}\``);
        await c.end();
        return true;
      },
      { timeoutMs: 60_000, what: `the private MariaDB on port ${port} to answer` },
    );
  };
  await start();
  return {
    url: `mysql://root@${bind}:${port}/${database}`,
    port,
    socket,
    kill: () => void child?.kill('SIGKILL'),
    start,
    stop: async () => {
      if (child) await stopProcess(child, 10_000);
    },
  };
}
