/**
 * Admission: each replica takes at most its limit of requests at once (routing.ts `limit`); a request that finds
 * every replica of its model full waits in that model's bounded queue, served round-robin between API keys, until a
 * slot frees (dispatched to it), its deadline passes (503 LLMGW_QUEUE_TIMEOUT) or its client leaves. A full queue
 * answers 429 LLMGW_QUEUE_FULL at once. With room, admission is one counter test and the table's own pick.
 */
import type { ServerResponse } from 'node:http';
import type { ErrorCode } from '../../lib/errors';
import type { KeyRecord } from '../../lib/store/keys';
import type { PickResult, RoutableReplica, RoutingTable } from './routing';

/** Who a request is counted as between keys: its stored key's name, else (a static key) its Authorization header. */
export function admissionKeyOf(apiKey: KeyRecord | null, authorization: string | undefined): string {
  return apiKey?.name ?? authorization ?? '';
}

/** The request a waiter answers: its response, the gateway's own error answer, and giving the response up. */
export interface WaitingExchange {
  readonly res: ServerResponse;
  /** Answers with the gateway's error in OpenAI's shape, with Retry-After. */
  fail(code: ErrorCode, message: string, retryAfterS?: number): void;
  /** Nothing is to be answered (the client left). */
  hijack(): void;
}

/** Options of the admission queue (server.yaml gateway.admission). */
export interface AdmissionOptions {
  /** requests that may wait per model; 0: none wait */
  queueMax: number;
  /** how long one may wait, ms */
  queueTimeoutMs: number;
  /** told of every request turned away (metrics) */
  onReject?: (model: string, why: 'queue-full' | 'queue-timeout' | 'client-left') => void;
}

/** Sends an admitted request on to `replica`. */
export type Forward = (replica: RoutableReplica, firstByteMs: number | undefined) => void;

interface Waiter {
  key: string;
  forward: Forward;
  settle: () => void;
  timer: NodeJS.Timeout | null;
}

/** One model's waiting requests: a FIFO per key, and a ring of the keys that have any, served in turn. */
class KeyedQueue {
  size = 0;
  private readonly byKey = new Map<string, Waiter[]>();
  private readonly ring: string[] = [];
  private turn = 0;

  push(w: Waiter): void {
    let list = this.byKey.get(w.key);
    if (!list) {
      list = [];
      this.byKey.set(w.key, list);
      this.ring.push(w.key);
    }
    list.push(w);
    this.size++;
  }

  /** The next key's oldest waiter, round-robin between keys. */
  shift(): Waiter | undefined {
    if (this.size === 0) return undefined;
    if (this.turn >= this.ring.length) this.turn = 0;
    const key = this.ring[this.turn];
    const list = this.byKey.get(key) as Waiter[];
    const w = list.shift() as Waiter;
    if (list.length === 0) this.dropKey(key, this.turn);
    else this.turn++;
    this.size--;
    return w;
  }

  /** Takes `w` out (its deadline passed or its client left). */
  remove(w: Waiter): boolean {
    const list = this.byKey.get(w.key);
    const i = list ? list.indexOf(w) : -1;
    if (!list || i < 0) return false;
    list.splice(i, 1);
    this.size--;
    if (list.length === 0) this.dropKey(w.key, this.ring.indexOf(w.key));
    return true;
  }

  private dropKey(key: string, at: number): void {
    this.byKey.delete(key);
    this.ring.splice(at, 1);
    if (at < this.turn) this.turn--;
  }
}

/** Admission in front of a routing table; it hears of freed slots from the table. */
export class Admission {
  private readonly queues = new Map<string, KeyedQueue>();
  /** Waiting requests over all models: 0 keeps the fast path to a single test. */
  private waiting = 0;
  private readonly draining = new Set<string>();

  constructor(
    private readonly routing: RoutingTable,
    private readonly opts: AdmissionOptions,
  ) {
    routing.listen({
      freed: (id) => {
        if (this.waiting > 0) this.schedule(routing.modelOf(id));
      },
      refreshed: () => {
        for (const [model, q] of this.queues) if (q.size > 0) this.schedule(model);
      },
    });
  }

  /**
   * A replica with room for a new request of `model` (by its affinity `key` when it has one), or why not; `busy`
   * also while others already wait (first come).
   */
  pick(model: string, key: number | null = null): PickResult {
    // Behind the waiters, without a pick: a pick moves the round-robin cursor and may hand an ejected replica its
    // trial, which only a request actually sent may do.
    if (this.waiting > 0 && (this.queues.get(model)?.size ?? 0) > 0) return BUSY;
    return this.routing.pick(model, undefined, true, key);
  }

  /** Requests waiting for `model` now. */
  queued(model: string): number {
    return this.queues.get(model)?.size ?? 0;
  }

  /** Every model's waiting requests (metrics). */
  queuedByModel(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [m, q] of this.queues) out.set(m, q.size);
    return out;
  }

  /**
   * Queues a request that found every replica full; resolves once it was forwarded or answered (429 when the queue
   * is full, 503 when its deadline passed). Not with the reply: a reply is a thenable that settles with the answer.
   */
  wait(model: string, key: string, x: WaitingExchange, forward: Forward): Promise<void> {
    let q = this.queues.get(model);
    if (!q) {
      q = new KeyedQueue();
      this.queues.set(model, q);
    }
    if (q.size >= this.opts.queueMax) {
      this.opts.onReject?.(model, 'queue-full');
      x.fail(
        'LLMGW_QUEUE_FULL',
        `model ${model} is at capacity: every replica holds its limit of requests and ${q.size} wait already; retry after 1 s`,
        1,
      );
      return Promise.resolve();
    }
    const queue = q;
    return new Promise<void>((settle) => {
      const w: Waiter = { key, forward, settle, timer: null };
      queue.push(w);
      this.waiting++;
      const retryS = Math.max(1, Math.ceil(this.opts.queueTimeoutMs / 2000));
      w.timer = setTimeout(() => {
        if (!this.take(queue, w)) return;
        this.opts.onReject?.(model, 'queue-timeout');
        x.fail(
          'LLMGW_QUEUE_TIMEOUT',
          `model ${model}: no replica had room within ${this.opts.queueTimeoutMs} ms; retry after ${retryS} s`,
          retryS,
        );
        settle();
      }, this.opts.queueTimeoutMs);
      // A client that leaves gives up its place; its request never reaches a replica.
      x.res.once('close', () => {
        if (!this.take(queue, w)) return;
        this.opts.onReject?.(model, 'client-left');
        x.hijack();
        settle();
      });
    });
  }

  /** Removes `w` from `q` if it is still there (true), clearing its timer. */
  private take(q: KeyedQueue, w: Waiter): boolean {
    if (!q.remove(w)) return false;
    this.waiting--;
    if (w.timer) clearTimeout(w.timer);
    return true;
  }

  /**
   * Serves `model`'s queue after the current turn: a request retried after its replica failed takes its slot again
   * first (it was admitted already), then waiters get what is left.
   */
  private schedule(model: string | undefined): void {
    if (model === undefined || this.draining.has(model) || !this.queues.get(model)?.size) return;
    this.draining.add(model);
    queueMicrotask(() => {
      this.draining.delete(model);
      this.drain(model);
    });
  }

  private drain(model: string): void {
    const q = this.queues.get(model);
    while (q && q.size > 0) {
      const p = this.routing.pick(model, undefined, true);
      // Busy, or no replica at all for now: the waiters stay until a slot, a new table or their deadline.
      if (p.kind !== 'ok') return;
      const w = q.shift() as Waiter;
      this.waiting--;
      if (w.timer) clearTimeout(w.timer);
      // forward acquires the slot before it returns, so the next pick sees it taken.
      w.forward(p.replica, p.firstByteMs);
      w.settle();
    }
  }
}

const BUSY: PickResult = Object.freeze({ kind: 'busy' });
