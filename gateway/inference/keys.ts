/**
 * The gateway's copy of the key store: every key by its SHA-256, refreshed from MySQL every `refreshMs` with only
 * the rows changed since the last read, so a request never waits on MySQL and a revocation reaches every gateway
 * within a refresh (a quarter of a second by default).
 */
import { checkKeyShape, keyDigest, parseBearer } from '../../lib/api-keys';
import type { KeyRecord } from '../../lib/store/keys';
import { silentLog, type GatewayLog } from './log';

/** Where the table reads changes from (KeyStore.changedSince). */
export type KeySource = (since: Date | null) => Promise<{ keys: KeyRecord[]; now: Date }>;

/** Who a request is: a stored key, a static key from server.yaml (every model, no quota), or why neither (401). */
export type AuthResult = { kind: 'key'; key: KeyRecord } | { kind: 'static' } | { kind: 'refused'; message: string };

/** A static key's answer, shared (no allocation per request). */
const STATIC: AuthResult = { kind: 'static' };
/** Most distinct Authorization headers remembered (header → key); past it the cache starts over. */
const HEADER_CACHE_MAX = 10_000;
/** How far back each incremental read reaches past the last one, ms: a transaction that committed late is still seen. */
const OVERLAP_MS = 2000;

/** The keys a gateway accepts. */
export class KeyTable {
  private readonly byDigest = new Map<string, KeyRecord>();
  /** The raw header → its key, so a known key costs a Map lookup and no SHA-256. Hits only: misses are not kept. */
  private readonly byHeader = new Map<string, { kind: 'key'; key: KeyRecord }>();
  private readonly statics: Set<string>;
  private since: Date | null = null;
  private timer: NodeJS.Timeout | null = null;
  private refreshing = false;
  private failing = false;
  private readonly log: GatewayLog;

  constructor(
    private readonly source: KeySource | null,
    opts: { staticKeys?: readonly string[]; refreshMs?: number; log?: GatewayLog; clock?: () => number } = {},
  ) {
    this.statics = new Set((opts.staticKeys ?? []).map((k) => `Bearer ${k}`));
    this.refreshMs = opts.refreshMs ?? 250;
    this.log = opts.log ?? silentLog;
    this.clock = opts.clock ?? Date.now;
  }

  private readonly refreshMs: number;
  private readonly clock: () => number;

  /** Loads every key (errors propagate), then reads changes every refreshMs in the background. */
  async start(): Promise<void> {
    await this.refresh();
    this.stop();
    if (!this.source) return;
    this.timer = setInterval(() => {
      if (this.refreshing) return;
      this.refreshing = true;
      this.refresh()
        .then(() => {
          if (this.failing) this.log('key store readable again', { level: 'info' });
          this.failing = false;
        })
        .catch((err: Error) => {
          // Serve the last copy: a key store that cannot be read must not turn every request away.
          if (!this.failing)
            this.log('cannot read the key store; serving the last copy', { level: 'error', error: err.message });
          this.failing = true;
        })
        .finally(() => (this.refreshing = false));
    }, this.refreshMs);
    this.timer.unref();
  }

  /** Stops the background refresh. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Reads the keys changed since the last read and updates them in place (cached headers see the change). */
  async refresh(): Promise<void> {
    if (!this.source) return;
    const { keys, now } = await this.source(this.since ? new Date(this.since.getTime() - OVERLAP_MS) : null);
    for (const k of keys) {
      const known = this.byDigest.get(k.digest);
      if (known) Object.assign(known, k);
      else this.byDigest.set(k.digest, k);
    }
    this.since = now;
  }

  /** True when nothing at all would be accepted: no stored key and no static key (the 401 then says how to make one). */
  empty(): boolean {
    return this.byDigest.size === 0 && this.statics.size === 0;
  }

  /** Who sent a request with this Authorization header. One SHA-256 the first time a header is seen, none after. */
  authenticate(header: string | undefined): AuthResult {
    if (header !== undefined) {
      const hit = this.byHeader.get(header);
      if (hit) return this.valid(hit.key) ?? hit;
      if (this.statics.has(header)) return STATIC;
    }
    const bearer = parseBearer(header);
    if (bearer.kind === 'error') return this.refused(bearer.message);
    const shape = checkKeyShape(bearer.key);
    if (shape) return this.refused(shape);
    const key = this.byDigest.get(keyDigest(bearer.key));
    if (!key) return this.refused('invalid API key: no such key (created on another cluster, or never created?)');
    if (this.byHeader.size >= HEADER_CACHE_MAX) this.byHeader.clear();
    const result = { kind: 'key', key } as const;
    this.byHeader.set(header as string, result);
    return this.valid(key) ?? result;
  }

  /** A refusal for a key that exists but is revoked or expired, else null. */
  private valid(key: KeyRecord): AuthResult | null {
    if (key.revoked) return { kind: 'refused', message: `invalid API key: key ${key.name} was revoked` };
    if (key.expiresAt !== null && key.expiresAt <= this.clock())
      return {
        kind: 'refused',
        message: `invalid API key: key ${key.name} expired at ${new Date(key.expiresAt).toISOString()}`,
      };
    return null;
  }

  private refused(message: string): AuthResult {
    return {
      kind: 'refused',
      message: this.empty()
        ? `${message}; this gateway has no API key at all yet: create one with llmgw ctl keys create NAME`
        : message,
    };
  }
}

/** Null when `key` may use `model`, else the 403's message naming the model (and, if it no longer exists, saying so). */
export function scopeRefusal(key: KeyRecord, model: string, exists: (model: string) => boolean): string | null {
  if (key.models === null || key.models.includes(model)) return null;
  const gone = key.models.filter((m) => !exists(m));
  const allowed = key.models.map((m) => (gone.includes(m) ? `${m} (no longer served)` : m)).join(', ');
  return `key ${key.name} may not use model ${JSON.stringify(model)}; it may use: ${allowed}`;
}
