/**
 * The control plane's Prometheus series (docs/metrics.md): nodes and replicas by state and workflows by status, read
 * on scrape (MySQL and Temporal's visibility, each cached so a busy scraper costs one query per CACHE_MS), and
 * registration refusals by reason, counted as they happen.
 */
import type { Client } from '@temporalio/client';
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';

/** How long one read of MySQL or Temporal answers scrapes. */
const CACHE_MS = 5000;

type Log = (msg: string, fields: Record<string, unknown>) => void;

/** A value read at most once per CACHE_MS; the last one stays while a read fails. */
function cached<T>(read: () => Promise<T>, empty: T): () => Promise<T> {
  let at = 0;
  let value = empty;
  return async () => {
    if (Date.now() - at >= CACHE_MS) {
      // A failed read keeps the last value (a scrape must not fail because MySQL blinked); the next scrape tries again.
      value = await read().catch(() => value);
      at = Date.now();
    }
    return value;
  };
}

/** The control plane's metrics registry and the hooks that feed it. */
export interface ControlMetrics {
  registry: Registry;
  /** The control server's log, passed through, counting the registration refusals it reports. */
  countingLog(log: Log): Log;
}

/** Builds the control plane's registry over its pool and Temporal client. */
export function controlMetrics(o: { pool: Pool; client: Client; log: Log }): ControlMetrics {
  const registry = new Registry();
  const counts = (table: 'nodes' | 'replicas'): (() => Promise<RowDataPacket[]>) =>
    cached(async () => {
      const [rows] = await o.pool.query<RowDataPacket[]>(`SELECT state, COUNT(*) AS n FROM ${table} GROUP BY state`);
      return rows;
    }, []);
  const nodes = counts('nodes');
  const replicas = counts('replicas');
  for (const [name, help, read] of [
    ['llmgw_control_nodes', 'Registered nodes by state (MySQL)', nodes],
    ['llmgw_control_replicas', 'Replicas by state (MySQL), stopped ones included', replicas],
  ] as const) {
    new Gauge({
      name,
      help,
      labelNames: ['state'],
      registers: [registry],
      async collect(): Promise<void> {
        const rows = await read();
        this.reset();
        for (const r of rows) this.set({ state: String(r.state) }, Number(r.n));
      },
    });
  }
  let visibilityFailed = false;
  const workflows = cached(
    async () => {
      try {
        const c = await o.client.workflow.count('GROUP BY ExecutionStatus');
        visibilityFailed = false;
        return c.groups.map((g) => ({ status: String(g.groupValues[0]), n: g.count }));
      } catch (err) {
        if (!visibilityFailed)
          o.log('metrics: cannot count workflows in Temporal (llmgw_control_workflows left out)', {
            level: 'warn',
            error: (err as Error).message,
          });
        visibilityFailed = true;
        return [];
      }
    },
    [] as { status: string; n: number }[],
  );
  new Gauge({
    name: 'llmgw_control_workflows',
    help: "Workflow executions in Temporal's visibility (its retention) by status: the sum is those started, Failed the failed",
    labelNames: ['status'],
    registers: [registry],
    async collect(): Promise<void> {
      const rows = await workflows();
      this.reset();
      for (const r of rows) this.set({ status: r.status }, r.n);
    },
  });
  const refusals = new Counter({
    name: 'llmgw_control_registration_refusals_total',
    help: 'Agent registrations refused, by reason (a certificate refusal, a claim of another node id)',
    labelNames: ['reason'],
    registers: [registry],
  });
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    countingLog: (log) => (msg, fields) => {
      const url = String(fields.url ?? '');
      if (url.startsWith('/v1/agent/register')) {
        if (msg === 'certificate refused') refusals.inc({ reason: String(fields.reason) });
        else if (msg === 'node identity refused') refusals.inc({ reason: 'identity-mismatch' });
      }
      log(msg, fields);
    },
  };
}
