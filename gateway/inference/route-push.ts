/**
 * Routes pushed, not polled: the gateway subscribes to a control plane's route stream (GET /v1/gateway/routes,
 * with its gateway certificate) and applies each change to its routing table as it comes. It reads the table
 * whole only at start, on `resync`, and while its push connection is lost: then it polls every refreshMs, logs
 * the loss once, and resubscribes (trying the next control plane), after the cursor of the table it holds.
 */
import type { ClientRequest } from 'node:http';
import { request } from 'node:https';
import type { RouteStreamLine } from '../control/contract';
import { silentLog, type GatewayLog } from './log';
import type { RoutingTable } from './routing';

/** Options of a route push subscription. */
export interface RoutePushOptions {
  table: RoutingTable;
  /** Control planes' base URLs (https://host:port), tried in turn */
  urls: string[];
  /** The gateway certificate, its key and the cluster CA (PEM) */
  tls: { caPem: string; certPem: string; keyPem: string };
  /** How often the table is read whole while push is lost, ms */
  refreshMs: number;
  log?: GatewayLog;
  /** The first wait before resubscribing, ms (default 500); doubles to retryMaxMs while it keeps failing */
  retryMs?: number;
  /** The longest wait before resubscribing, ms (default 5000) */
  retryMaxMs?: number;
  /** How long a control plane may take to answer a subscription, ms (default 10 s) */
  helloMs?: number;
  /** Called after each pushed change or resync is applied (the gateway's in-flight report is written at once) */
  onApplied?: () => void;
}

/** Where the table's changes come from now. */
export type RouteSource = 'push' | 'poll';

/** Keeps the routing table current by push, falling back to polling while no control plane pushes. */
export class RoutePush {
  private req: ClientRequest | null = null;
  private poller: NodeJS.Timeout | null = null;
  private polling: Promise<void> | null = null;
  private retry: NodeJS.Timeout | null = null;
  private watchdog: NodeJS.Timeout | null = null;
  private retryMs: number;
  private next = 0;
  private stopped = false;
  private subscribed = false;
  /** Since when push is lost (null: never subscribed yet, or subscribed now) */
  private lostSince: number | null = null;
  private lostLogged = false;
  private readonly log: GatewayLog;
  /** Lines of the current stream, handled one at a time (a resync reads the store before the next) */
  private chain: Promise<void> = Promise.resolve();
  private changes = 0;

  constructor(private readonly o: RoutePushOptions) {
    if (o.urls.length === 0) throw new Error('route push needs at least one control plane URL');
    this.log = o.log ?? silentLog;
    this.retryMs = o.retryMs ?? 500;
  }

  /** Push when subscribed, poll while not. */
  get source(): RouteSource {
    return this.subscribed ? 'push' : 'poll';
  }

  /** Route changes applied from pushes so far. */
  get applied(): number {
    return this.changes;
  }

  /** Reads the table whole (errors propagate), then subscribes; polls until the subscription answers. */
  async start(): Promise<void> {
    await this.o.table.refresh();
    this.startPolling();
    this.connect();
  }

  /** Ends the subscription and the polling. */
  stop(): void {
    this.stopped = true;
    this.stopPolling();
    if (this.retry) clearTimeout(this.retry);
    if (this.watchdog) clearTimeout(this.watchdog);
    this.req?.destroy();
    this.req = null;
  }

  private startPolling(): void {
    if (this.poller || this.stopped) return;
    this.poller = setInterval(() => this.pollOnce(), this.o.refreshMs);
    this.poller.unref();
  }

  private pollOnce(): void {
    // A store that hangs must not pile up queries: one refresh at a time.
    if (this.polling) return;
    this.polling = this.o.table
      .refresh()
      .catch(() => undefined)
      .finally(() => {
        this.polling = null;
      });
  }

  private stopPolling(): void {
    if (this.poller) clearInterval(this.poller);
    this.poller = null;
  }

  private connect(): void {
    if (this.stopped) return;
    const base = this.o.urls[this.next++ % this.o.urls.length].replace(/\/$/, '');
    const url = `${base}/v1/gateway/routes?after=${this.o.table.changeCursor}`;
    let buffered = '';
    let done = false;
    const fail = (reason: string): void => {
      if (done) return;
      done = true;
      req.destroy();
      this.lost(base, reason);
    };
    const req = request(url, {
      method: 'GET',
      ca: this.o.tls.caPem,
      cert: this.o.tls.certPem,
      key: this.o.tls.keyPem,
      agent: false,
      headers: { accept: 'application/x-ndjson' },
    });
    this.req = req;
    this.arm(this.o.helloMs ?? 10_000, () => fail(`no answer within ${this.o.helloMs ?? 10_000} ms`));
    req.on('error', (err) => fail(err.message));
    req.on('response', (res) => {
      if (res.statusCode !== 200) {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d.slice(0, 2000)));
        res.on('end', () => {
          let msg = body.slice(0, 300);
          try {
            msg = (JSON.parse(body) as { error?: { message?: string } }).error?.message ?? msg;
          } catch {
            // not JSON: the text as it came
          }
          fail(`HTTP ${res.statusCode}: ${msg}`);
        });
        return;
      }
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        buffered += d;
        let nl: number;
        while ((nl = buffered.indexOf('\n')) >= 0) {
          const text = buffered.slice(0, nl);
          buffered = buffered.slice(nl + 1);
          if (!text) continue;
          let line: RouteStreamLine;
          try {
            line = JSON.parse(text) as RouteStreamLine;
          } catch {
            fail(`a line that is not JSON: ${text.slice(0, 100)}`);
            return;
          }
          this.chain = this.chain.then(() => (done ? undefined : this.handle(line, base, fail)));
        }
      });
      res.on('end', () => fail('the control plane ended the stream'));
      res.on('aborted', () => fail('the connection was cut'));
      res.on('close', () => fail('the connection closed'));
    });
    req.end();
  }

  /** One line of the stream, in order. */
  private async handle(line: RouteStreamLine, base: string, fail: (reason: string) => void): Promise<void> {
    switch (line.kind) {
      case 'hello': {
        // Silence longer than two pings and a second means the stream is gone (a frozen or unreachable control plane).
        const deadline = 2 * line.pingMs + 1000;
        this.arm(deadline, () => fail(`no line for ${deadline} ms`));
        this.stopPolling();
        // A read started before the subscription must not land after (and over) the changes it pushes.
        await this.polling;
        this.subscribed = true;
        this.retryMs = this.o.retryMs ?? 500;
        if (this.lostSince !== null)
          this.log('route push resumed: routing table updated by the control plane again', {
            level: 'info',
            controlPlane: base,
            lostForMs: Date.now() - this.lostSince,
          });
        else this.log('route push subscribed', { level: 'info', controlPlane: base });
        this.lostSince = null;
        this.lostLogged = false;
        return;
      }
      case 'change':
        this.rearm();
        this.o.table.apply(line.change);
        this.changes++;
        this.o.onApplied?.();
        return;
      case 'ping':
        this.rearm();
        return;
      case 'resync':
        this.rearm();
        this.log('route push: reading the routing table whole', { level: 'info', reason: line.reason });
        try {
          await this.o.table.refresh();
          this.o.onApplied?.();
        } catch (err) {
          fail(`resync read failed: ${(err as Error).message}`);
        }
        return;
      default: {
        const never: never = line;
        void never;
      }
    }
  }

  /** Calls `onSilence` unless a line comes within `ms` (each line re-arms it: rearm). */
  private arm(ms: number, onSilence: () => void): void {
    if (this.watchdog) clearTimeout(this.watchdog);
    this.watchdog = setTimeout(onSilence, ms);
    this.watchdog.unref();
  }

  private rearm(): void {
    this.watchdog?.refresh();
  }

  /** The stream is gone: poll, say so once, and resubscribe after a while (to the next control plane). */
  private lost(base: string, reason: string): void {
    if (this.watchdog) clearTimeout(this.watchdog);
    this.watchdog = null;
    this.req = null;
    this.chain = Promise.resolve();
    if (this.stopped) return;
    const wasSubscribed = this.subscribed;
    this.subscribed = false;
    this.lostSince ??= Date.now();
    if (!this.lostLogged) {
      this.lostLogged = true;
      this.log(
        wasSubscribed
          ? 'route push lost: reading the routing table from MySQL every refreshMs until resubscribed'
          : 'route push unavailable: reading the routing table from MySQL every refreshMs until subscribed',
        { level: 'warn', controlPlane: base, reason, refreshMs: this.o.refreshMs },
      );
    }
    this.startPolling();
    // At once: changes made while the stream was down are not left waiting for the first interval.
    if (wasSubscribed) this.pollOnce();
    const wait = this.retryMs;
    this.retryMs = Math.min(this.retryMs * 2, this.o.retryMaxMs ?? 5000);
    this.retry = setTimeout(() => this.connect(), wait);
    this.retry.unref();
  }
}
