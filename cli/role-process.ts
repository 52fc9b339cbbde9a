/** What every long-running role process shares: its own signal handling and a stop with a deadline. */
import { Runtime } from '@temporalio/worker';
import { defaultedIn } from '../config/load';
import type { ServerConfig } from '../config/types';
import { EXIT_WITH_PARENT } from '../lib/process';

/**
 * This process's signals are handled by untilSignal alone: the Temporal runtime's own handlers would
 * start draining workers behind the role's back (and before the control plane stopped taking requests).
 */
export function ownSignals(): void {
  Runtime.install({ shutdownSignals: [] });
}


/** Keeps the process alive until SIGINT/SIGTERM, then closes `close` and exits. */
export function untilSignal(close: () => Promise<void>): Promise<never> {
  return new Promise(() => {
    let stopping = false;
    const stop = (): void => {
      if (stopping) return;
      stopping = true;
      const force = setTimeout(() => process.exit(1), 30_000);
      force.unref();
      void close().then(() => process.exit(0), (err: Error) => {
        process.stderr.write(`error while stopping: ${err.message}\n`);
        process.exit(1);
      });
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
export function announceDefaultDatabase(config: ServerConfig, log: (msg: string, fields: Record<string, unknown>) => void): void {
  const file = defaultedIn(config, 'mysql');
  if (file === null) return;
  log('no mysql section in the configuration: using the built-in default database', {
    level: 'warn', config: file, url: config.mysql.url, fix: 'set mysql.url in server.yaml (--config FILE) to use another database',
  });
}

/** The --config line of every role's help. */
export const CONFIG_HELP = '  --config FILE   server.yaml (default: built-in local-cluster defaults; see config/server.example.yaml)';
