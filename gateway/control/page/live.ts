/**
 * Live updates for the cluster page: one snapshot for every connected browser, rebuilt once a second while any
 * is connected (nothing at all while none is), and pushed as a server-sent event to each whenever it changed.
 */
import type { ServerResponse } from 'node:http';

/** How often the shared snapshot is rebuilt while a page is open, ms. */
export const LIVE_EVERY_MS = 1000;
/** A comment line this often keeps idle proxies from closing the stream, ms. */
const KEEPALIVE_MS = 15_000;

interface Subscriber {
  res: ServerResponse;
  /** the session it was opened with: its stream ends when that session signs out */
  session: string;
}

/** Builds snapshots on demand and pushes changed ones to every open event stream. */
export class LiveSnapshots<T> {
  private readonly subs = new Set<Subscriber>();
  private timer: NodeJS.Timeout | null = null;
  private keepalive: NodeJS.Timeout | null = null;
  private last: string | null = null;
  private stopped = false;

  constructor(
    private readonly build: () => Promise<T>,
    private readonly log: (msg: string, fields: Record<string, unknown>) => void,
    private readonly everyMs = LIVE_EVERY_MS,
  ) {}

  /** The current snapshot (the shared one while pages are open; else built now). */
  async current(): Promise<T> {
    return this.last !== null && this.subs.size ? (JSON.parse(this.last) as T) : this.build();
  }

  /** Takes over `res` as an event stream: the current snapshot at once, then each change. */
  subscribe(res: ServerResponse, session: string): void {
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      'x-accel-buffering': 'no',
      connection: 'keep-alive',
    });
    res.write('retry: 1000\n\n');
    const sub = { res, session };
    this.subs.add(sub);
    res.on('close', () => this.subs.delete(sub));
    if (this.last !== null) this.send(sub, this.last);
    if (!this.timer && !this.stopped) void this.tick();
    this.keepalive ??= setInterval(() => {
      for (const s of this.subs) s.res.write(': keepalive\n\n');
    }, KEEPALIVE_MS).unref();
  }

  /** Ends the streams opened with `session` (it signed out). */
  endSession(session: string): void {
    for (const s of this.subs) if (s.session === session) s.res.end();
  }

  /** Stops rebuilding and ends every stream (the control plane closes). */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.keepalive) clearInterval(this.keepalive);
    for (const s of this.subs) s.res.end();
    this.subs.clear();
  }

  private send(sub: Subscriber, json: string): void {
    sub.res.write(`event: snapshot\ndata: ${json}\n\n`);
  }

  /** One rebuild, then the next a second after it ends (never two at once, however slow MySQL is). */
  private async tick(): Promise<void> {
    this.timer = null;
    if (this.stopped || this.subs.size === 0) {
      this.last = null; // nobody watching: the next page starts from a fresh one
      return;
    }
    this.timer = setTimeout(() => undefined, this.everyMs); // a placeholder: no second tick starts meanwhile
    try {
      const json = JSON.stringify(await this.build());
      if (json !== this.last) {
        this.last = json;
        for (const s of this.subs) this.send(s, json);
      }
    } catch (err) {
      this.log('cluster page snapshot failed', { error: (err as Error).message });
    }
    clearTimeout(this.timer);
    if (!this.stopped) this.timer = setTimeout(() => void this.tick(), this.everyMs);
  }
}
