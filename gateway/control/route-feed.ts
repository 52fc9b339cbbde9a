/**
 * The control plane's route feed: tails table route_changes by id and pushes each change to the gateways
 * subscribed here, whichever control plane's worker made it. A change this process wrote is pushed at once
 * (`poke`); one another control plane wrote, at the next tail (every `tailMs` while a gateway listens).
 */
import type { RouteChange, RouteChanges } from '../../lib/store/route-changes';
import type { RouteStreamLine } from './contract';
import type { ControlLog } from './identity';

/** Options of a route feed. */
export interface RouteFeedOptions {
  changes: Pick<RouteChanges, 'latest' | 'oldest' | 'since' | 'prune'>;
  log: ControlLog;
  /** How often route_changes is read while a gateway is subscribed, ms (default 20) */
  tailMs?: number;
  /** How often it is read with no gateway subscribed (keeps the cursor near), ms (default 1000) */
  idleTailMs?: number;
  /** How often each subscriber hears a ping (it gives up on a silent stream after a few), ms (default 5000) */
  pingMs?: number;
  /** How long an id below the newest seen is waited for (a transaction that took it has not committed), ms (default 10 s) */
  gapMs?: number;
  /** Changes older than this are pruned, ms (default 1 h); a gateway whose cursor is older reads the table whole */
  keepMs?: number;
  now?: () => number;
}

/** One subscribed gateway: its lines go out through `write`; false from it means the stream is cut. */
interface Subscriber {
  after: number;
  write(line: string): boolean;
  end(): void;
  /** Lines held while its catch-up read runs (sent after it, so a newer read never precedes an older one) */
  held: string[] | null;
}

const PAGE = 500;

/** Tails route_changes and fans each change out to the subscribed gateways. */
export class RouteFeed {
  /** Every id at or below `low` was delivered (or waited for gapMs and given up) */
  private low = 0;
  /** Ids above `low` delivered already */
  private readonly seen = new Set<number>();
  /** Ids above `low` not seen yet, with when they were first missed */
  private readonly missing = new Map<number, number>();
  private readonly subscribers = new Set<Subscriber>();
  private timer: NodeJS.Timeout | null = null;
  private pinger: NodeJS.Timeout | null = null;
  private tailing: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  private failing = false;
  private lastPrune = 0;
  private readonly now: () => number;

  constructor(private readonly o: RouteFeedOptions) {
    this.now = o.now ?? Date.now;
  }

  /** How often subscribers are pinged, ms (told to each, so it knows when a stream went silent). */
  get pingMs(): number {
    return this.o.pingMs ?? 5000;
  }

  /** Starts at the newest change and tails from there. */
  async start(): Promise<void> {
    this.low = await this.o.changes.latest();
    this.lastPrune = this.now();
    this.schedule();
    this.pinger = setInterval(() => this.ping(), this.pingMs);
    this.pinger.unref();
  }

  /** Stops tailing and ends every subscriber's stream. */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.pinger) clearInterval(this.pinger);
    for (const s of this.subscribers) s.end();
    this.subscribers.clear();
  }

  /** Tails now: this process just wrote a change. */
  poke(): void {
    if (this.stopped) return;
    if (this.tailing) {
      this.again = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.tailing = this.tail().finally(() => {
      this.tailing = null;
      if (this.again) {
        this.again = false;
        this.poke();
      } else this.schedule();
    });
  }

  /** Subscribers now. */
  get size(): number {
    return this.subscribers.size;
  }

  /**
   * Adds a gateway that holds every change up to `after`: it is sent the changes after that (one read), then each
   * new one as it comes. A cursor older than the kept changes gets `resync` (it reads the table whole) instead.
   */
  async subscribe(after: number, write: (line: string) => boolean, end: () => void): Promise<() => void> {
    const sub: Subscriber = { after, write, end, held: [] };
    this.subscribers.add(sub);
    const remove = (): void => void this.subscribers.delete(sub);
    const send = (line: RouteStreamLine): boolean => {
      if (sub.write(`${JSON.stringify(line)}\n`)) return true;
      remove();
      sub.end();
      return false;
    };
    if (!send({ kind: 'hello', cursor: after, pingMs: this.pingMs })) return remove;
    try {
      const oldest = await this.o.changes.oldest();
      if (after > 0 && oldest !== null && oldest > after + 1) {
        send({ kind: 'resync', reason: `changes after ${after} are no longer kept (oldest kept: ${oldest})` });
      } else {
        for (let from = after; ;) {
          const page = await this.o.changes.since(from, PAGE);
          for (const c of page) if (!send({ kind: 'change', change: c })) return remove;
          if (page.length < PAGE) break;
          from = page[page.length - 1].seq;
        }
      }
    } catch (err) {
      this.o.log('route push: catch-up read failed; the gateway reads the table whole', {
        error: (err as Error).message,
      });
      send({ kind: 'resync', reason: `catch-up read failed: ${(err as Error).message}` });
    }
    const held = sub.held ?? [];
    sub.held = null;
    for (const line of held)
      if (!sub.write(line)) {
        remove();
        sub.end();
        return remove;
      }
    this.poke();
    return remove;
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(
      () => this.poke(),
      this.subscribers.size ? (this.o.tailMs ?? 20) : (this.o.idleTailMs ?? 1000),
    );
    this.timer.unref();
  }

  /** One read of the changes above `low`: new ones go out, and `low` moves up past what is complete. */
  private async tail(): Promise<void> {
    let page: RouteChange[];
    try {
      page = await this.o.changes.since(this.low, PAGE);
      if (this.failing) this.o.log('route feed reads route_changes again', { level: 'info' });
      this.failing = false;
    } catch (err) {
      if (!this.failing)
        this.o.log('route feed cannot read route_changes; gateways keep their tables until it can', {
          error: (err as Error).message,
        });
      this.failing = true;
      return;
    }
    const now = this.now();
    let top = this.low;
    for (const c of page) {
      top = Math.max(top, c.seq);
      if (this.seen.has(c.seq)) continue;
      this.seen.add(c.seq);
      this.missing.delete(c.seq);
      this.fanOut({ kind: 'change', change: c });
    }
    // Ids below the newest seen that were not read belong to transactions not yet committed (or rolled back).
    if (top - this.low > 10 * PAGE) {
      this.low = top;
      this.seen.clear();
      this.missing.clear();
    } else {
      for (let id = this.low + 1; id < top; id++)
        if (!this.seen.has(id) && !this.missing.has(id)) this.missing.set(id, now);
      const gapMs = this.o.gapMs ?? 10_000;
      for (;;) {
        const next = this.low + 1;
        if (this.seen.delete(next)) this.low = next;
        else if ((this.missing.get(next) ?? Infinity) + gapMs <= now) {
          // Rolled back, or a transaction open longer than gapMs: a gateway holding that replica learns it at its
          // next full read (resubscribe), not from this feed.
          this.o.log('route feed stopped waiting for a route change (rolled back, or still uncommitted)', {
            seq: next,
            waitedMs: now - this.missing.get(next)!,
          });
          this.missing.delete(next);
          this.low = next;
        } else break;
      }
    }
    if (page.length === PAGE) this.again = true;
    await this.prune(now);
  }

  private fanOut(line: RouteStreamLine): void {
    const text = `${JSON.stringify(line)}\n`;
    for (const s of this.subscribers) {
      if (line.kind === 'change' && line.change.seq <= s.after) continue;
      if (s.held) s.held.push(text);
      else if (!s.write(text)) {
        this.subscribers.delete(s);
        s.end();
      }
    }
  }

  private ping(): void {
    this.fanOut({ kind: 'ping', cursor: this.low });
  }

  private async prune(now: number): Promise<void> {
    const keepMs = this.o.keepMs ?? 3600_000;
    if (now - this.lastPrune < Math.min(keepMs, 600_000)) return;
    this.lastPrune = now;
    await this.o.changes.prune(keepMs).catch(() => 0);
  }
}
