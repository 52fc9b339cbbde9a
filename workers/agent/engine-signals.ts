/**
 * The agent's engine signals: every `periodMs` (default 500 ms, so at least once a second) it reads each rank 0
 * engine on this node for its queue and KV-cache use (lib/engines/signals.ts) and keeps the last answer with its
 * time. The node's door hands them to gateways (GET /nodes/NODE/signals); nothing here touches the control path,
 * and an engine that does not answer only lets its signal age (the gateway then routes on its own in-flight counts).
 */
import {
  parseAnySignals,
  parseSignals,
  SIGNALS_PATH,
  type EngineSignal,
  type SignalTargets,
} from '../../lib/engines/signals';
import type { EngineName } from '../../lib/types';

/** A replica's last signal and how old it is. */
export interface ReplicaSignal extends EngineSignal {
  ageMs: number;
}

interface Target {
  /** 'any': not known (the node's door process), read by whichever engine's names the answer holds */
  engine: EngineName | 'any';
  baseUrl: string;
  last: EngineSignal | null;
  at: number;
  busy: boolean;
  /** Said once per target that its engine does not answer with signals */
  warned: boolean;
}

/** Options of the gatherer. */
export interface EngineSignalsOptions {
  periodMs?: number;
  /** How long one read may take, ms (default 800) */
  timeoutMs?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
  now?: () => number;
}

/** Reads every tracked engine's signals on a timer; `snapshot()` is what the door serves. */
export class EngineSignals implements SignalTargets {
  private readonly targets = new Map<string, Target>();
  private timer: NodeJS.Timeout | null = null;
  private readonly now: () => number;

  constructor(private readonly o: EngineSignalsOptions = {}) {
    this.now = o.now ?? Date.now;
  }

  track(replicaId: string, engine: EngineName | 'any', baseUrl: string): void {
    const t = this.targets.get(replicaId);
    if (t?.baseUrl === baseUrl && t.engine === engine) return;
    this.targets.set(replicaId, { engine, baseUrl, last: null, at: 0, busy: false, warned: false });
    void this.read(replicaId);
  }

  untrack(replicaId: string, baseUrl: string): void {
    if (this.targets.get(replicaId)?.baseUrl === baseUrl) this.targets.delete(replicaId);
  }

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      for (const id of this.targets.keys()) void this.read(id);
    }, this.o.periodMs ?? 500);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Every tracked replica's last signal with its age (replicas never read yet are left out). */
  snapshot(): Record<string, ReplicaSignal> {
    const now = this.now();
    const out: Record<string, ReplicaSignal> = {};
    for (const [id, t] of this.targets) if (t.last) out[id] = { ...t.last, ageMs: Math.max(0, now - t.at) };
    return out;
  }

  /** One read of one engine; one at a time per engine (a slow engine is not asked again until it answers). */
  private async read(replicaId: string): Promise<void> {
    const t = this.targets.get(replicaId);
    if (!t || t.busy) return;
    t.busy = true;
    try {
      const res = await fetch(`${t.baseUrl}${SIGNALS_PATH}`, { signal: AbortSignal.timeout(this.o.timeoutMs ?? 800) });
      const text = await res.text();
      const s = !res.ok ? null : t.engine === 'any' ? parseAnySignals(text) : parseSignals(t.engine, text);
      if (s) {
        t.last = s;
        t.at = this.now();
      } else if (!t.warned) {
        t.warned = true;
        this.o.log?.('engine signals: the engine answers no queue length; the gateways route it by in-flight counts', {
          level: 'warn',
          replica: replicaId,
          engine: t.engine,
          status: res.status,
        });
      }
    } catch {
      // Not answering (starting, busy, gone): its last signal ages until the gateways stop using it.
    } finally {
      t.busy = false;
    }
  }
}
