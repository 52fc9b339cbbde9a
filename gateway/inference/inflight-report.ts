/**
 * A gateway's in-flight report: about every second, what its routing table routes and how many requests it has
 * in flight on each replica, written to MySQL, so a stopping replica waits for this gateway's requests to finish.
 * A timer reads the in-memory table; the request path never waits on MySQL.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { GATEWAY_HEARTBEAT_MS, type GatewayReport } from '../../lib/store/drain';

/** Where reports go: the DrainStore (or a fake in tests). */
export interface ReportSink {
  report(gatewayId: string, r: GatewayReport): Promise<void>;
  forget(gatewayId: string): Promise<void>;
}

/** Options of an InflightReporter. */
export interface InflightReporterOptions {
  /** the routing table (its `report()`) */
  source: { report(): GatewayReport };
  sink: ReportSink;
  /** default: newGatewayId() */
  gatewayId?: string;
  /** how often the table is read, ms (default 1000) */
  periodMs?: number;
  /** an unchanged, idle report is written again after this long, ms (default GATEWAY_HEARTBEAT_MS) */
  heartbeatMs?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

/** A gateway process's id in the reports: its host name, pid and a random suffix, new at every start. */
export function newGatewayId(): string {
  return `${hostname()}/${process.pid}-${randomBytes(3).toString('hex')}`;
}

/** Writes the report when it changed, while anything is in flight (so the row stays live), or as a heartbeat. */
export class InflightReporter {
  readonly gatewayId: string;
  private timer: NodeJS.Timeout | null = null;
  private writing: Promise<void> | null = null;
  private last = '';
  private lastAt = 0;
  private failing = false;
  /** A poke came while a write was under way: check again once it is done. */
  private again = false;
  private readonly log: NonNullable<InflightReporterOptions['log']>;

  constructor(private readonly o: InflightReporterOptions) {
    this.gatewayId = o.gatewayId ?? newGatewayId();
    this.log = o.log ?? ((): void => undefined);
  }

  /** Writes the first report now, then checks every period in the background. */
  start(): void {
    void this.tick();
    this.timer = setInterval(() => void this.tick(), this.o.periodMs ?? 1000);
    // The report alone must not keep the process alive.
    this.timer.unref();
  }

  /**
   * Checks now, not at the next period: the routing table just changed (a pushed route change), and `ctl deploy`
   * waits until every live gateway's report routes the new replica. A poke during a write checks again after it.
   */
  poke(): void {
    if (!this.timer) return;
    if (this.writing) this.again = true;
    else void this.tick();
  }

  /** One check: writes the report if it is due (never two writes at once); resolves when done. Failures are logged, not thrown. */
  tick(): Promise<void> {
    if (this.writing) return this.writing;
    const r = this.o.source.report();
    const key = JSON.stringify(r);
    const busy = Object.keys(r.inflight).length > 0;
    const at = Date.now();
    if (key === this.last && !busy && at - this.lastAt < (this.o.heartbeatMs ?? GATEWAY_HEARTBEAT_MS))
      return Promise.resolve();
    this.writing = this.o.sink
      .report(this.gatewayId, r)
      .then(
        () => {
          if (this.failing) this.log('in-flight report written again', { gateway: this.gatewayId });
          this.failing = false;
          this.last = key;
          this.lastAt = at;
        },
        (err: Error) => {
          // Once per outage: a stopping replica stops counting this gateway after GATEWAY_LIVE_MS without a report.
          if (!this.failing)
            this.log('in-flight report failed; drains stop counting this gateway until it is written again', {
              gateway: this.gatewayId,
              error: err.message,
            });
          this.failing = true;
        },
      )
      .finally(() => {
        this.writing = null;
        if (this.again) {
          this.again = false;
          if (this.timer) void this.tick();
        }
      });
    return this.writing;
  }

  /** Stops reporting and removes this gateway's row: call once the server has closed (nothing is in flight). */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.writing;
    await this.o.sink
      .forget(this.gatewayId)
      .catch((err: Error) =>
        this.log('could not remove the in-flight report', { gateway: this.gatewayId, error: err.message }),
      );
  }
}
