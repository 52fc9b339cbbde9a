/**
 * The llmgw-ca role: a Temporal worker on the llmgw-ca queue running the CA activities over the CA directory
 * of its own host (the CA key never leaves it), and keeping that directory's crl.pem fresh.
 */
import { NativeConnection, Worker } from '@temporalio/worker';
import { createCaActivities, createCaOperations, type CurrentCrl } from '../activities/ca';
import { createOffboardActivities } from '../activities/ca/offboard';
import { createOnboardActivities } from '../activities/ca/onboard';
import type { ServerConfig } from '../config/types';
import { QUEUES } from '../lib/names';
import { connectTemporal } from '../lib/temporal-connect';
import { openConfiguredDatabase } from '../lib/store/db';
import { HostKeyStore } from '../lib/store/host-keys';
import { Store } from '../lib/store/store';

export interface CaWorkerOptions {
  config: Pick<ServerConfig, 'temporal' | 'mysql'>;
  /** the CA directory (ca.crt, ca.key, crl.pem) */
  caDir: string;
  /** how long each CRL is valid, days (default 7; fractions allowed, so a test need not wait days) */
  crlDays?: number;
  /** after a failed CRL refresh, try again this soon, ms (default 60 s) */
  crlRetryMs?: number;
  log?: (msg: string, fields: Record<string, unknown>) => void;
}

export interface CaWorker {
  /** the CRL this process's refresh published last */
  crl(): CurrentCrl;
  close(): Promise<void>;
}

/** Starts the CA worker; resolves once the CA loaded, a first CRL is written and the worker polls. */
export async function startCaWorker(opts: CaWorkerOptions): Promise<CaWorker> {
  const log = opts.log ?? ((): void => undefined);
  const pool = await openConfiguredDatabase(opts.config.mysql, 'caWorker');
  const deps = {
    caDir: opts.caDir,
    store: new Store(pool),
    crlDays: opts.crlDays,
    log: (msg: string, f?: Record<string, unknown>): void => log(msg, f ?? {}),
  };
  const ops = createCaOperations(deps);
  let last: CurrentCrl;
  try {
    // Fails at once (LLMGW_CA_MISSING / LLMGW_CA_INVALID, naming the fix) rather than at the first activity.
    last = await ops.currentCrl();
  } catch (err) {
    await pool.end();
    throw err;
  }
  log('crl published', {
    number: last.number,
    revoked: last.revoked,
    nextUpdate: last.nextUpdate,
    refreshAt: last.refreshAt,
  });

  const connection = await connectTemporal(opts.config.temporal, (options) => NativeConnection.connect(options)).catch(
    async (err: unknown) => {
      await pool.end();
      throw err;
    },
  );
  const worker = await Worker.create({
    connection,
    namespace: opts.config.temporal.namespace,
    taskQueue: QUEUES.ca,
    // Onboarding runs here too: it needs the CA key (the node's certificate) and this host's ssh key.
    // Onboarding's steps heartbeat what they wait for; the CLI and the UI show it within a second, not at the
    // default throttle (80% of the 30 s heartbeat timeout).
    maxHeartbeatThrottleInterval: '1s',
    defaultHeartbeatThrottleInterval: '1s',
    activities: {
      ...createCaActivities(deps),
      ...createOnboardActivities({
        caDir: opts.caDir,
        store: deps.store,
        hostKeys: new HostKeyStore(pool),
        ca: ops,
        log: deps.log,
      }),
      ...createOffboardActivities({ hostKeys: new HostKeyStore(pool) }),
    },
  });
  const running = worker.run();

  // CRL refresh: a timer in this process rather than a Temporal Schedule. crl.pem is a file on this host that
  // only this process can write, so a schedule fails exactly when this worker is down, like the timer does — but
  // it is one more thing to create, keep in step with --crl-days, and clean up. Each re-issue is due at the
  // current CRL's refreshAt (half its life), so one missed refresh still leaves half a validity to notice.
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const schedule = (ms: number): void => {
    if (stopped) return;
    timer = setTimeout(() => void refresh(), Math.max(0, Math.min(ms, 2 ** 31 - 1)));
  };
  const refresh = async (): Promise<void> => {
    try {
      last = await ops.currentCrl();
      log('crl published', {
        number: last.number,
        revoked: last.revoked,
        nextUpdate: last.nextUpdate,
        refreshAt: last.refreshAt,
      });
    } catch (err) {
      log('CRL REFRESH FAILED: retrying', {
        error: (err as Error).message,
        nextUpdate: last.nextUpdate,
        retryMs: opts.crlRetryMs ?? 60_000,
      });
      schedule(opts.crlRetryMs ?? 60_000);
      return;
    }
    schedule(Date.parse(last.refreshAt) - Date.now());
  };
  schedule(Date.parse(last.refreshAt) - Date.now());

  return {
    crl: () => last,
    async close(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => undefined);
      await connection.close();
      await pool.end();
    },
  };
}
