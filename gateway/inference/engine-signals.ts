/**
 * The gateway's side of engine signals: every `periodMs` (default 1 s) it asks each node's door behind which it
 * routes a replica for the engines' last signals (GET /nodes/NODE/signals, which the node's agent gathers), over
 * the same keep-alive TLS pool as requests, and records them in the routing table's EngineLoad. A signal older
 * than `staleMs` (default 3 s, by the age the door reports plus the time since) is dropped, so a door that stops
 * answering leaves its replicas to the in-flight counts. The request path never waits on any of it.
 */
import { doorGet, type DoorAgent } from '../../lib/door-agent';
import { silentLog, type GatewayLog } from './log';
import type { RoutingTable } from './routing';

/** Options of the poller. */
export interface SignalPollerOptions {
  table: RoutingTable;
  agent: DoorAgent;
  periodMs?: number;
  staleMs?: number;
  /** How long one door may take to answer, ms (default 900) */
  timeoutMs?: number;
  log?: GatewayLog;
  now?: () => number;
}

/** A door's answer: replica id → its engine's signal and how old it was when the door answered. */
interface DoorSignals {
  replicas?: Record<string, { waiting?: unknown; kvUsage?: unknown; ageMs?: unknown }>;
}

const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : null);

/** Polls the nodes' doors for engine signals into the routing table. */
export class SignalPoller {
  private timer: NodeJS.Timeout | null = null;
  private readonly busy = new Set<string>();
  private readonly failing = new Set<string>();
  private readonly now: () => number;
  private readonly log: GatewayLog;

  constructor(private readonly o: SignalPollerOptions) {
    this.now = o.now ?? Date.now;
    this.log = o.log ?? silentLog;
  }

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.tick(), this.o.periodMs ?? 1000);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** One round: every door asked (one question per door at a time), then stale signals dropped. */
  async tick(): Promise<void> {
    const asks = this.o.table.doors().map((d) => this.ask(d));
    this.o.table.engineLoad.dropOlderThan(this.now() - (this.o.staleMs ?? 3000));
    await Promise.all(asks);
  }

  private async ask(d: { host: string; port: number; node: string }): Promise<void> {
    const key = `${d.host}|${d.port}|${d.node}`;
    if (this.busy.has(key)) return;
    this.busy.add(key);
    const base = `/nodes/${encodeURIComponent(d.node)}`;
    try {
      const sent = this.now();
      const r = await doorGet(
        this.o.agent,
        { host: d.host, port: d.port, node: d.node, replica: '', base },
        '/signals',
        this.o.timeoutMs ?? 900,
      );
      if (r.status !== 200) throw new Error(`HTTP ${r.status}`);
      const body = JSON.parse(r.body) as DoorSignals;
      for (const [id, s] of Object.entries(body.replicas ?? {})) {
        const waiting = num(s.waiting);
        const age = num(s.ageMs);
        // One the agent has not renewed for staleMs (its engine stopped answering) is left for the drop.
        if (waiting === null || age === null || age > (this.o.staleMs ?? 3000)) continue;
        this.o.table.engineLoad.set(id, { waiting, kvUsage: num(s.kvUsage) }, sent - age);
      }
      if (this.failing.delete(key))
        this.log('engine signals: the node door answers again', { level: 'info', node: d.node });
    } catch (err) {
      if (!this.failing.has(key)) {
        this.failing.add(key);
        this.log("engine signals: cannot read a node door's signals; its replicas are routed by in-flight counts", {
          level: 'warn',
          node: d.node,
          door: `${d.host}:${d.port}`,
          error: (err as Error).message,
        });
      }
    } finally {
      this.busy.delete(key);
    }
  }
}
