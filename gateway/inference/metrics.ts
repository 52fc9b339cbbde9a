/**
 * The gateway's Prometheus series (docs/metrics.md). The request path touches only numbers in cells cached per
 * (model, key, status) and a few `performance.now()` stamps on the request's CallTimes; labels, gauges and text
 * are made when Prometheus scrapes.
 */
import { createHash } from 'node:crypto';
import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { CellCounter, CellHistogram, type CounterCell, type HistogramCell } from '../../lib/metrics/cells';
import type { RoutingTable } from './routing';
import type { UsageMeter } from './usage-meter';

/** When a request reached each step, ms (performance.now()); 0: not (yet). The last attempt's, after a retry. */
export interface CallTimes {
  /** the request's headers were read (the fast path's handler, or fastify's onRequest) */
  arrivedAt: number;
  /** how long it waited in admission's queue */
  queuedMs: number;
  /** the first attempt's request was handed to the upstream socket */
  sentAt: number;
  /** the upstream's response head arrived */
  headAt: number;
  /** the gateway had passed that head on and piped the body */
  headDoneAt: number;
  /** a stream's first chunk arrived (and was written to the client) */
  firstChunkAt: number;
  /** the last two chunks of the answer, where usage is */
  tail: Buffer | null;
  prev: Buffer | null;
  stream: boolean;
}

/** Kinds of upstream error counted. */
export type UpstreamErrorKind = 'connect' | 'timeout' | 'reset' | 'status-5xx' | 'cut';

interface KeyCells {
  statuses: Map<number, CounterCell>;
  prompt: CounterCell;
  completion: CounterCell;
}
interface ModelCells {
  ttft: HistogramCell;
  tpot: HistogramCell;
  keys: Map<string, KeyCells>;
}

/** How many distinct keys get a label of their own; more (an open gateway sent random keys) share `other`. */
const MAX_KEYS = 1000;

const TTFT_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const TPOT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64];
const ADDED_BUCKETS = [0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1];

/** The first usage numbers in `buf` (`"prompt_tokens":N`, `"completion_tokens":N`), or null. */
function usageIn(buf: Buffer | null): { prompt: number; completion: number } | null {
  if (!buf) return null;
  const at = buf.lastIndexOf('"completion_tokens"');
  if (at < 0) return null;
  const from = Math.max(0, at - 200);
  const text = buf.toString('latin1', from, Math.min(buf.length, at + 200));
  const c = /"completion_tokens"\s*:\s*(\d+)/.exec(text);
  const p = /"prompt_tokens"\s*:\s*(\d+)/.exec(text);
  return c ? { prompt: p ? Number(p[1]) : 0, completion: Number(c[1]) } : null;
}

/** The gateway's metrics, in a registry of its own (served by gateway/metrics.ts). */
export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly requests: CellCounter;
  private readonly promptTokens: CellCounter;
  private readonly completionTokens: CellCounter;
  private readonly ttft: CellHistogram;
  private readonly tpot: CellHistogram;
  private readonly added: CellHistogram;
  private readonly addedCell: HistogramCell;
  private readonly upstreamErrors: CellCounter;
  private readonly upstreamCells = new Map<string, CounterCell>();
  private readonly ejections: CellCounter;
  private readonly ejectionCells = new Map<string, CounterCell>();
  private readonly rejected: CellCounter;
  private readonly rejectedCells = new Map<string, CounterCell>();
  private readonly models = new Map<string, ModelCells>();
  private readonly keyIds = new Map<string, string>();

  private readonly routing: RoutingTable;
  private queued: () => Map<string, number> = () => new Map();

  constructor(o: { routing: RoutingTable }) {
    this.routing = o.routing;
    o.routing.onEject((replica) => this.ejected(replica));
    const r = this.registry;
    this.requests = new CellCounter(
      'llmgw_gateway_requests_total',
      'Inference requests answered, by model, key and HTTP status (499: the client left first)',
      r,
    );
    this.promptTokens = new CellCounter(
      'llmgw_gateway_prompt_tokens_total',
      'Prompt tokens the engines reported (usage) in answers, by model and key',
      r,
    );
    this.completionTokens = new CellCounter(
      'llmgw_gateway_completion_tokens_total',
      'Completion tokens the engines reported (usage) in answers, by model and key',
      r,
    );
    this.ttft = new CellHistogram(
      'llmgw_gateway_ttft_seconds',
      "Streams: from the request's arrival to its first chunk written to the client, queueing included",
      TTFT_BUCKETS,
      r,
    );
    this.tpot = new CellHistogram(
      'llmgw_gateway_time_per_output_token_seconds',
      'Streams with usage: (end - first chunk) / (completion tokens - 1)',
      TPOT_BUCKETS,
      r,
    );
    this.added = new CellHistogram(
      'llmgw_gateway_added_latency_seconds',
      "The gateway's own time per answered request: arrival to upstream request written (queue wait excluded), plus upstream response head to it passed on",
      ADDED_BUCKETS,
      r,
    );
    this.addedCell = this.added.cell({});
    this.upstreamErrors = new CellCounter(
      'llmgw_gateway_upstream_errors_total',
      'Failed attempts at a replica, by model, replica and kind (connect, timeout, reset, status-5xx, cut)',
      r,
    );
    this.ejections = new CellCounter(
      'llmgw_gateway_ejections_total',
      'Times a replica was ejected (skipped for a while) after it failed to connect',
      r,
    );
    this.rejected = new CellCounter(
      'llmgw_gateway_admission_rejected_total',
      'Requests that left admission unserved, by model and reason (queue-full: 429, queue-timeout: 503, client-left)',
      r,
    );
    const { routing } = o;
    const queued = (): Map<string, number> => this.queued();
    new Gauge({
      name: 'llmgw_gateway_inflight',
      help: 'Requests in flight on each replica through this gateway',
      labelNames: ['model', 'replica'],
      registers: [r],
      collect(): void {
        this.reset();
        for (const [replica, n] of Object.entries(routing.report().inflight))
          this.set({ model: routing.modelOf(replica) ?? '', replica }, n);
      },
    });
    new Gauge({
      name: 'llmgw_gateway_engine_waiting',
      help: "Requests each replica's engine reports waiting (its queue), as this gateway weighs it: fresh signals only",
      labelNames: ['model', 'replica'],
      registers: [r],
      collect(): void {
        this.reset();
        for (const [replica, s] of routing.engineLoad.entries())
          this.set({ model: routing.modelOf(replica) ?? '', replica }, s.waiting);
      },
    });
    new Gauge({
      name: 'llmgw_gateway_engine_kv_usage',
      help: "Share of each replica's engine KV cache in use (0..1), as this gateway weighs it: fresh signals only",
      labelNames: ['model', 'replica'],
      registers: [r],
      collect(): void {
        this.reset();
        for (const [replica, s] of routing.engineLoad.entries())
          this.set({ model: routing.modelOf(replica) ?? '', replica }, s.kvUsage);
      },
    });
    new Gauge({
      name: 'llmgw_gateway_replica_limit',
      help: "Each routed replica's concurrency limit (catalog maxConcurrent, engine slots or the default)",
      labelNames: ['model', 'replica'],
      registers: [r],
      collect(): void {
        this.reset();
        for (const x of routing.limits()) this.set({ model: x.model, replica: x.id }, x.limit);
      },
    });
    new Gauge({
      name: 'llmgw_gateway_queued',
      help: "Requests waiting in admission's queue, by model (the queue is per model: any replica of it may take them)",
      labelNames: ['model'],
      registers: [r],
      collect(): void {
        this.reset();
        for (const [model, n] of queued()) this.set({ model }, n);
      },
    });
    collectDefaultMetrics({ register: r });
  }

  /** Where the queue lengths come from (the app's admission). */
  watchQueue(queued: () => Map<string, number>): void {
    this.queued = queued;
  }

  /** True when `model` is in the routing table (only those become labels). */
  knows(model: string): boolean {
    return this.routing.has(model);
  }

  /** The `key` label of an Authorization header: 8 hex of its sha256 (`none` without one; the key's name once keys are stored). */
  keyIdOf(authorization: string | undefined): string {
    if (!authorization) return 'none';
    let id = this.keyIds.get(authorization);
    if (id === undefined) {
      id = this.keyIds.size < MAX_KEYS ? createHash('sha256').update(authorization).digest('hex').slice(0, 8) : 'other';
      if (id !== 'other') this.keyIds.set(authorization, id);
    }
    return id;
  }

  /** A request's times, stamped as it goes. */
  times(arrivedAt: number): CallTimes {
    return {
      arrivedAt,
      queuedMs: 0,
      sentAt: 0,
      headAt: 0,
      headDoneAt: 0,
      firstChunkAt: 0,
      tail: null,
      prev: null,
      stream: false,
    };
  }

  /**
   * A proxied request ended with `status` (499 when the client left first): counts, tokens, latencies. The tokens
   * are the quota's meter's when the request has one (read once for both), else read from the answer's last chunks.
   */
  done(model: string, key: string, status: number, t: CallTimes, meter?: UsageMeter): void {
    const m = this.modelCells(model);
    const k = this.keyCells(m, model, key);
    this.count(k, model, key, status);
    const usage = meter ? meter.reported() : (usageIn(t.tail) ?? usageIn(t.prev));
    if (usage) {
      k.prompt.value += usage.prompt;
      k.completion.value += usage.completion;
    }
    if (t.sentAt > 0 && t.headDoneAt > 0)
      this.added.observe(this.addedCell, (t.sentAt - t.arrivedAt - t.queuedMs + t.headDoneAt - t.headAt) / 1000);
    if (t.stream && t.firstChunkAt > 0) {
      this.ttft.observe(m.ttft, (t.firstChunkAt - t.arrivedAt) / 1000);
      if (usage && usage.completion > 1)
        this.tpot.observe(m.tpot, (performance.now() - t.firstChunkAt) / 1000 / (usage.completion - 1));
    }
  }

  /** The gateway answered an inference request itself (an error before or instead of a replica). */
  answered(model: string, key: string, status: number): void {
    const m = this.modelCells(model);
    this.count(this.keyCells(m, model, key), model, key, status);
  }

  /** An attempt at `replica` failed. */
  upstreamError(model: string, replica: string, kind: UpstreamErrorKind): void {
    const id = `${model}\n${replica}\n${kind}`;
    let c = this.upstreamCells.get(id);
    if (!c) this.upstreamCells.set(id, (c = this.upstreamErrors.cell({ model, replica, kind })));
    c.value++;
  }

  /** `replica` was ejected. */
  ejected(replica: string): void {
    let c = this.ejectionCells.get(replica);
    if (!c) this.ejectionCells.set(replica, (c = this.ejections.cell({ replica })));
    c.value++;
  }

  /** Admission turned a request away. */
  rejectedBy(model: string, reason: string): void {
    const id = `${model}\n${reason}`;
    let c = this.rejectedCells.get(id);
    if (!c) this.rejectedCells.set(id, (c = this.rejected.cell({ model, reason })));
    c.value++;
  }

  private count(k: KeyCells, model: string, key: string, status: number): void {
    let c = k.statuses.get(status);
    if (!c) k.statuses.set(status, (c = this.requests.cell({ model, key, status: String(status) })));
    c.value++;
  }

  private modelCells(model: string): ModelCells {
    let m = this.models.get(model);
    if (!m) {
      m = { ttft: this.ttft.cell({ model }), tpot: this.tpot.cell({ model }), keys: new Map() };
      this.models.set(model, m);
    }
    return m;
  }

  private keyCells(m: ModelCells, model: string, key: string): KeyCells {
    let k = m.keys.get(key);
    if (!k) {
      k = {
        statuses: new Map(),
        prompt: this.promptTokens.cell({ model, key }),
        completion: this.completionTokens.cell({ model, key }),
      };
      m.keys.set(key, k);
    }
    return k;
  }
}
