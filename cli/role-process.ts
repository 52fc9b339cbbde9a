/** What every long-running role process shares: one JSON logger for all it writes, its own signal handling, a stop with a deadline. */
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { defaultedIn } from '../config/load';
import type { MetricsListener, ServerConfig } from '../config/types';
import { EXIT_WITH_PARENT } from '../lib/process';
import { makeLog, type Log } from './log';

/** The Temporal SDK's levels as the role log's. */
const LEVELS = { TRACE: 'info', DEBUG: 'info', INFO: 'info', WARN: 'warn', ERROR: 'error' } as const;

/**
 * The process's Temporal runtime. Its signals are handled by untilSignal alone: the runtime's own handlers would
 * start draining workers behind the role's back (and before the control plane stopped taking requests). Whatever
 * the SDK logs — its TypeScript side and, forwarded, its Rust core (which otherwise writes ANSI-coloured text of
 * its own to stderr) — goes to the role's log as JSON lines, with `sdkComponent` (`core`, `worker`, `activity`).
 */
export function installRoleRuntime(log: Log, metrics: { host: string; port: number } | null = null): void {
  const bindAddress = metrics
    ? `${metrics.host.includes(':') ? `[${metrics.host}]` : metrics.host}:${metrics.port}`
    : null;
  Runtime.install({
    shutdownSignals: [],
    logger: new DefaultLogger('INFO', (e) => log(e.message, { ...e.meta, level: LEVELS[e.level] })),
    telemetryOptions: {
      logging: { forward: {}, filter: { core: 'INFO', other: 'WARN' } },
      // The SDK's own series (polls, task latencies, workflow completions and failures …) on a port of their own.
      ...(bindAddress ? { metrics: { prometheus: { bindAddress, countersTotalSuffix: true } } } : {}),
    },
  });
  if (bindAddress) log('temporal sdk metrics listening', { url: `http://${bindAddress}/metrics` });
}

/** The Temporal SDK's metrics listener of a role's metrics settings (temporalPort 0: none). */
export function temporalMetricsOf(m: MetricsListener | null): { host: string; port: number } | null {
  return m && m.temporalPort > 0 ? { host: m.host, port: m.temporalPort } : null;
}

/**
 * Runs a role until SIGINT/SIGTERM: its log (`c` = `component`), the Temporal runtime unless `temporal: false` (a
 * role that reads where its SDK metrics go from server.yaml installs it itself, installRoleRuntime, first thing in
 * `start`), then `start`. A start that fails is one `error` line in that log and exit code 1, not the CLI's plain text.
 */
export async function runRole(
  component: string,
  start: (log: Log) => Promise<{ close(): Promise<void> }>,
  o: { temporal?: boolean; temporalMetrics?: { host: string; port: number } | null } = {},
): Promise<never> {
  const log = makeLog(component);
  if (o.temporal !== false) installRoleRuntime(log, o.temporalMetrics ?? null);
  let role: { close(): Promise<void> };
  try {
    role = await start(log);
  } catch (err) {
    const e = err as Error & { code?: string };
    log(`${component} could not start`, { level: 'error', ...(e.code ? { code: e.code } : {}), error: e.message });
    process.exit(1);
  }
  return untilSignal(() => role.close(), log);
}

/** Keeps the process alive until SIGINT/SIGTERM, then closes `close` and exits. */
function untilSignal(close: () => Promise<void>, log: Log): Promise<never> {
  return new Promise(() => {
    let stopping = false;
    const stop = (): void => {
      if (stopping) return;
      stopping = true;
      const force = setTimeout(() => process.exit(1), 30_000);
      force.unref();
      void close().then(
        () => process.exit(0),
        (err: Error) => {
          log('error while stopping', { level: 'error', error: err.message });
          process.exit(1);
        },
      );
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
    if (process.env[EXIT_WITH_PARENT]) {
      const parent = process.ppid;
      setInterval(() => {
        if (process.ppid !== parent) stop();
      }, 1000).unref();
    }
  });
}

/**
 * Says, before a role writes to MySQL, that it will use the built-in default database because its config has no
 * `mysql:` section: an operator who forgot the section learns it before tables appear in the local database.
 */
export function announceDefaultDatabase(
  config: ServerConfig,
  log: (msg: string, fields: Record<string, unknown>) => void,
): void {
  const file = defaultedIn(config, 'mysql');
  if (file === null) return;
  log('no mysql section in the configuration: using the built-in default database', {
    level: 'warn',
    config: file,
    url: config.mysql.url,
    fix: 'set mysql.url in server.yaml (--config FILE) to use another database',
  });
}

/** The --config line of every role's help. */
export const CONFIG_HELP =
  '  --config FILE   server.yaml (default: built-in local-cluster defaults; see config/server.example.yaml)';
