/**
 * Per-key quotas that hold across gateways, and per-key usage. Counters live in MySQL (key_quota: what all gateways
 * together leased of each key's minute; key_usage: per hour), but no request waits on MySQL while its key's local
 * slice lasts: each gateway leases slices of a key's per-minute budget ahead of need, with an atomic conditional
 * update, and spends them locally. The sum of leases never passes the limit, so the only overshoot is tokens an
 * answer used past its estimate (charged after it ends). See docs/keys.md.
 */
import { ERRORS, type ErrorCode } from '../../lib/errors';
import type { KeyRecord, LeaseAsk, LeaseGrant, UsageDelta } from '../../lib/store/keys';
import { silentLog, type GatewayLog } from './log';
import { UsageBook } from './usage';

/** The part of KeyStore quotas and usage use. */
export interface QuotaStore {
  lease(a: LeaseAsk): Promise<LeaseGrant>;
  charge(keyId: number, minute: number, tokens: number): Promise<void>;
  addUsage(deltas: UsageDelta[]): Promise<void>;
  pruneQuota(minute: number): Promise<number>;
}

/** A 429: which limit, the message, and when to come back. */
export interface QuotaRefusal {
  code: Extract<ErrorCode, 'LLMGW_RATE_LIMITED_REQUESTS' | 'LLMGW_RATE_LIMITED_TOKENS'>;
  message: string;
  retryAfterS: number;
}

/** The answer of `take`: admitted (null), refused, or to be known once a lease returns. */
export type TakeResult = null | QuotaRefusal | Promise<QuotaRefusal | null>;

interface KeyState {
  key: KeyRecord;
  minute: number;
  /** local balances: leased and not yet spent (tokens below 0: spent past the leases, charged with the next lease) */
  requests: number;
  tokens: number;
  /** what was left of the minute's budget for all gateways after this gateway's last lease (only ever shrinks) */
  requestsLeft: number;
  tokensLeft: number;
  leasing: Promise<void> | null;
  /** requests waiting on a lease, and their estimates: the next lease asks for all of them (a burst) */
  waitingRequests: number;
  waitingTokens: number;
  /** granted without MySQL this minute while it could not be reached (at most one limit's worth per gateway) */
  provisional: number;
  /** what the key's answers used against their estimates (≥ 1): estimates are scaled by it, learned from usage */
  scale: number;
  /** a first slice of the next minute, leased in this minute's last seconds so that minute starts without a wait */
  next: { minute: number; requests: number; tokens: number; requestsLeft: number; tokensLeft: number } | null;
  nextLeasing: boolean;
}

/** Options of the quota keeper. */
export interface QuotaOptions {
  /** What one lease asks for, as a fraction of the limit (default 1/50: a slice is 2 % of a minute's budget). */
  slice?: number;
  /** How often usage is written to MySQL, ms (default 2000). */
  flushMs?: number;
  log?: GatewayLog;
  /** epoch ms now; tests pass their own */
  clock?: () => number;
  /**
   * How long a request waits on a lease, ms (default 2000): past it the store counts as down and the request is
   * served from a local slice (bounded, as in any outage). While it is down no request waits on it at all.
   */
  leaseWaitMs?: number;
}

const MINUTE = 60_000;
/** How long before a minute ends a key in use leases its first slice of the next one, ms. */
const PREFETCH_NEXT_MS = 3000;
/** Tokens a request without max_tokens is expected to produce; what it produces past that is charged afterwards. */
export const DEFAULT_COMPLETION_ESTIMATE = 256;

/** A request's token estimate: its prompt at 4 bytes a token (the body's JSON overhead makes it generous), plus its output bound. */
export function estimateTokens(bodyBytes: number, maxTokens: number | null, embeddings: boolean): number {
  return Math.ceil(bodyBytes / 4) + (embeddings ? 0 : (maxTokens ?? DEFAULT_COMPLETION_ESTIMATE));
}

/** Keeps every key's local slices and usage on one gateway. */
export class QuotaKeeper {
  private readonly states = new Map<number, KeyState>();
  private readonly charges: { keyId: number; minute: number; tokens: number }[] = [];
  private readonly usage: UsageBook;
  private readonly slice: number;
  private readonly log: GatewayLog;
  private readonly clock: () => number;
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  private storeDown = false;

  constructor(
    private readonly store: QuotaStore,
    private readonly opts: QuotaOptions = {},
  ) {
    this.slice = opts.slice ?? 1 / 50;
    this.log = opts.log ?? silentLog;
    this.clock = opts.clock ?? Date.now;
    this.usage = new UsageBook((d) => store.addUsage(d), this.log, this.clock);
  }

  /** Starts writing usage every flushMs (and forgetting old quota rows now and then). */
  start(): void {
    let n = 0;
    this.timer = setInterval(() => {
      void this.flush();
      // About every ten minutes: quota rows only matter while their minute runs.
      if (++n % Math.ceil(600_000 / (this.opts.flushMs ?? 2000)) === 1)
        void this.store.pruneQuota(Math.floor(this.clock() / MINUTE) - 60).catch(() => undefined);
    }, this.opts.flushMs ?? 2000);
    this.timer.unref();
  }

  /** Stops the timer and writes what is left. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.flush();
  }

  private state(key: KeyRecord): KeyState {
    const minute = Math.floor(this.clock() / MINUTE);
    let s = this.states.get(key.id);
    if (!s) {
      s = {
        key,
        minute,
        requests: 0,
        tokens: 0,
        requestsLeft: Infinity,
        tokensLeft: Infinity,
        leasing: null,
        waitingRequests: 0,
        waitingTokens: 0,
        provisional: 0,
        scale: 1,
        next: null,
        nextLeasing: false,
      };
      this.states.set(key.id, s);
    } else if (s.minute !== minute) {
      // A new minute: what was left of the old one's slices lapses; tokens spent past them are charged to it.
      if (s.tokens < 0) this.charges.push({ keyId: key.id, minute: s.minute, tokens: -s.tokens });
      s.minute = minute;
      const next = s.next?.minute === minute ? s.next : null;
      s.requests = next?.requests ?? 0;
      s.tokens = next?.tokens ?? 0;
      s.requestsLeft = next?.requestsLeft ?? Infinity;
      s.tokensLeft = next?.tokensLeft ?? Infinity;
      s.next = null;
      s.provisional = 0;
    }
    return s;
  }

  /**
   * A request's token estimate for this key: `raw` (estimateTokens) scaled by what the key's answers have used
   * against their estimates, so prompts the byte count undercounts (short words, other scripts) stop running past it.
   */
  estimate(key: KeyRecord, raw: number): number {
    const s = this.states.get(key.id);
    return s ? Math.ceil(raw * s.scale) : raw;
  }

  /** The minute a request admitted now is counted in (pass it back to `settle`). */
  minute(): number {
    return Math.floor(this.clock() / MINUTE);
  }

  /**
   * Admits one request of `key` expected to use `estimate` tokens: from the local slices when they hold it (no I/O),
   * else after a lease. A key without limits is always admitted.
   */
  take(key: KeyRecord, estimate: number): TakeResult {
    if (key.rpm === null && key.tpm === null) return null;
    const s = this.state(key);
    const short = this.shortOf(s, estimate);
    if (short === 'none') {
      this.spend(s, estimate);
      return null;
    }
    if (short !== 'lease') return short;
    return this.takeAfterLease(s, estimate);
  }

  private async takeAfterLease(s: KeyState, estimate: number): Promise<QuotaRefusal | null> {
    const r = s.key.rpm !== null ? 1 : 0;
    const t = s.key.tpm !== null ? estimate : 0;
    s.waitingRequests += r;
    s.waitingTokens += t;
    try {
      // Each lease grants at least one request's worth or finds the budget spent, so this ends; the bound is a guard.
      for (let tries = 0; tries < 30; tries++) {
        await this.lease(s, estimate);
        this.state(s.key);
        const short = this.shortOf(s, estimate);
        if (short === 'none') {
          this.spend(s, estimate);
          return null;
        }
        if (short !== 'lease') return short;
      }
      return this.refusal(
        s,
        s.key.rpm !== null && s.requests < 1 ? 'LLMGW_RATE_LIMITED_REQUESTS' : 'LLMGW_RATE_LIMITED_TOKENS',
      );
    } finally {
      s.waitingRequests -= r;
      s.waitingTokens -= t;
    }
  }

  /** What stands between the request and admission: nothing, a lease, or the minute's budget being spent. */
  private shortOf(s: KeyState, estimate: number): 'none' | 'lease' | QuotaRefusal {
    const { rpm, tpm } = s.key;
    const needR = rpm !== null && s.requests < 1;
    const needT = tpm !== null && s.tokens < estimate;
    if (!needR && !needT) return 'none';
    // The budget left to all gateways only shrinks: when even that cannot hold the request, no lease will.
    if (needR && s.requests + s.requestsLeft < 1) return this.refusal(s, 'LLMGW_RATE_LIMITED_REQUESTS');
    if (needT && s.tokens + s.tokensLeft < Math.min(estimate, tpm as number))
      return this.refusal(s, 'LLMGW_RATE_LIMITED_TOKENS');
    return 'lease';
  }

  private spend(s: KeyState, estimate: number): void {
    if (s.key.rpm !== null) s.requests -= 1;
    if (s.key.tpm !== null) s.tokens -= estimate;
    if (!s.nextLeasing && s.next === null && this.clock() % MINUTE >= MINUTE - PREFETCH_NEXT_MS) this.leaseNext(s);
    // Lease the next slice while this one still lasts, so requests rarely wait on one.
    if (s.leasing) return;
    const lowR = s.key.rpm !== null && s.requests < this.sliceOf(s.key.rpm) / 2 && s.requestsLeft > 0;
    const lowT = s.key.tpm !== null && s.tokens < this.sliceOf(s.key.tpm) / 2 && s.tokensLeft > 0;
    if (lowR || lowT) void this.lease(s, 0);
  }

  private sliceOf(limit: number): number {
    return Math.max(1, Math.ceil(limit * this.slice));
  }

  /** One lease at a time per key: callers meanwhile share it. */
  private lease(s: KeyState, estimate: number): Promise<void> {
    if (s.leasing) return s.leasing;
    const { rpm, tpm, id } = s.key;
    const minute = s.minute;
    const debt = s.tokens < 0 ? -s.tokens : 0;
    const needTokens = tpm === null ? 0 : Math.min(Math.max(0, estimate - Math.max(0, s.tokens)), tpm);
    const ask: LeaseAsk = {
      keyId: id,
      minute,
      rpm,
      tpm,
      wantRequests: rpm === null ? 0 : Math.max(this.sliceOf(rpm), s.waitingRequests - s.requests),
      needRequests: rpm === null ? 0 : Math.max(0, Math.min(1, 1 - s.requests)),
      wantTokens: tpm === null ? 0 : Math.max(this.sliceOf(tpm), needTokens, s.waitingTokens - s.tokens),
      needTokens,
      debtTokens: debt,
    };
    // The debt moves to MySQL with this lease.
    s.tokens += debt;
    // A MySQL that hangs or is gone must not hold requests: the request path waits leaseWaitMs at most, and not at
    // all while the store is known down (the lease still goes out, and its answer says when the store is back; a
    // grant that comes too late goes unused, which errs below the limit).
    const answer = this.store.lease(ask);
    answer.then(
      () => {
        if (this.storeDown) this.log('quota store reachable again', { level: 'info' });
        this.storeDown = false;
      },
      () => undefined,
    );
    s.leasing = (this.storeDown ? Promise.reject(new Error('the quota store is down')) : this.bounded(answer))
      .then((g) => {
        if (s.minute !== minute) return;
        s.requests += g.requests;
        s.tokens += g.tokens;
        s.requestsLeft = g.requestsLeft;
        s.tokensLeft = g.tokensLeft;
      })
      .catch((err: Error) => {
        if (!this.storeDown)
          this.log('cannot lease quota from MySQL; granting local slices (at most one limit per gateway per minute)', {
            level: 'error',
            error: err.message,
          });
        this.storeDown = true;
        if (s.minute !== minute) return;
        s.tokens -= debt;
        // Serving on through a MySQL outage, bounded: one full limit per gateway per minute at most.
        if (s.provisional < Math.max(rpm ?? 0, tpm ?? 0)) {
          if (rpm !== null) s.requests += ask.wantRequests;
          if (tpm !== null) s.tokens += ask.wantTokens;
          s.provisional += Math.max(ask.wantRequests, ask.wantTokens);
        }
      })
      .finally(() => {
        s.leasing = null;
      });
    return s.leasing;
  }

  /** `p`, or a rejection once leaseWaitMs passed without its answer. */
  private bounded<T>(p: Promise<T>): Promise<T> {
    const ms = this.opts.leaseWaitMs ?? 2000;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer from the quota store within ${ms} ms`)), ms);
      p.then(resolve, reject).finally(() => clearTimeout(timer));
    });
  }

  /** Leases one slice of the next minute for a key in use now (never more than a slice: it may go unused). */
  private leaseNext(s: KeyState): void {
    const { rpm, tpm, id } = s.key;
    const minute = s.minute + 1;
    s.nextLeasing = true;
    const ask: LeaseAsk = {
      keyId: id,
      minute,
      rpm,
      tpm,
      wantRequests: rpm === null ? 0 : this.sliceOf(rpm),
      needRequests: 0,
      wantTokens: tpm === null ? 0 : this.sliceOf(tpm),
      needTokens: 0,
      debtTokens: 0,
    };
    void this.store
      .lease(ask)
      .then((g) => {
        if (s.minute < minute)
          s.next = {
            minute,
            requests: g.requests,
            tokens: g.tokens,
            requestsLeft: g.requestsLeft,
            tokensLeft: g.tokensLeft,
          };
      })
      .catch(() => undefined) // the minute's first request leases as usual
      .finally(() => (s.nextLeasing = false));
  }

  private refusal(s: KeyState, code: QuotaRefusal['code']): QuotaRefusal {
    const retryAfterS = Math.max(1, Math.ceil(((s.minute + 1) * MINUTE - this.clock()) / 1000));
    const what = code === 'LLMGW_RATE_LIMITED_REQUESTS' ? `${s.key.rpm} requests` : `${s.key.tpm} tokens`;
    return {
      code,
      message: `rate limit reached for key ${s.key.name}: ${what} per minute; retry after ${retryAfterS} s`,
      retryAfterS,
    };
  }

  /**
   * Settles an admitted request once its answer ended: the tokens the engine reported replace the estimate (a
   * refund when fewer, a debt charged with the next lease when more), and usage is counted.
   */
  settle(
    key: KeyRecord,
    model: string,
    minute: number,
    estimate: number,
    promptTokens: number,
    completionTokens: number,
    /** true when the engine reported the counts (they teach the estimate's scale) */
    reported = false,
  ): void {
    if (key.tpm !== null) {
      const s = this.state(key);
      const used = promptTokens + completionTokens;
      // Up fast when answers run past their estimates (each excess is overshoot risk), down slowly, never below 1.
      if (reported && estimate > 0)
        s.scale = Math.min(
          8,
          Math.max(1, s.scale * (used > estimate ? used / estimate : 1 - 0.05 * (1 - used / estimate))),
        );
      const delta = used - estimate;
      if (s.minute === minute) s.tokens -= delta;
      else if (delta > 0) this.charges.push({ keyId: key.id, minute, tokens: delta });
    }
    this.usage.answered(key.id, model, promptTokens, completionTokens);
  }

  /** Counts a request the quota refused. */
  refused(key: KeyRecord, model: string): void {
    this.usage.refused(key.id, model);
  }

  /** Writes the usage counted since the last flush in one statement, and late charges; keeps them on failure. */
  flush(): Promise<void> {
    if (this.flushing) return this.flushing;
    const charges = this.charges.splice(0);
    this.flushing = (async (): Promise<void> => {
      await this.usage.flush();
      for (const c of charges)
        await this.store.charge(c.keyId, c.minute, c.tokens).catch(() => void this.charges.push(c));
    })().finally(() => (this.flushing = null));
    return this.flushing;
  }
}

/** The HTTP status of a quota refusal (429). */
export const QUOTA_STATUS = ERRORS.LLMGW_RATE_LIMITED_REQUESTS.status;
